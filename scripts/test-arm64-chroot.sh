#!/usr/bin/env bash
# The arm64 package on an arm64 Debian bookworm, emulated: what
# scripts/test-deb.sh does for amd64, in a chroot made by debootstrap
# --arch arm64 (scripts/bookworm-rootfs.sh, its second stage and
# everything in it run by qemu-user-static through binfmt_misc):
#
#   scripts/test-arm64-chroot.sh [DEB]
#
# DEB defaults to target/debian/osprey_VERSION_arm64.deb, which
# scripts/package.sh --arch arm64 makes (by hand: the first arm64 build
# compiles RocksDB for aarch64, 30+ minutes on 2 cores). In the chroot,
# tests/packaging/in-chroot.sh runs `dpkg -i`, checks the user, files and
# unit (systemd-analyze verify, itself arm64), runs `osprey --version` and
# `osprey demo` from /usr/bin and asks the demo over TCP, then `dpkg
# --purge` must leave the machine as it was. Needs root (apt,
# binfmt_misc, chroot, mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== test-arm64-chroot [${SECONDS}s]: $*"; }
. scripts/chroot.sh
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
deb=${1:-target/debian/osprey_${version}_arm64.deb}
[ -s "$deb" ] || { echo "test-arm64-chroot: no $deb (scripts/package.sh --arch arm64 makes it)" >&2; exit 1; }
[ "$(dpkg-deb -f "$deb" Architecture)" = arm64 ] || { echo "test-arm64-chroot: $deb is not arm64" >&2; exit 1; }

need_apt=()
command -v qemu-aarch64-static >/dev/null 2>&1 || need_apt+=(qemu-user-static)
command -v update-binfmts >/dev/null 2>&1 || need_apt+=(binfmt-support)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test-arm64-chroot: installing ${need_apt[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
# The F flag: the kernel opens the interpreter when it is registered, so
# it works inside a chroot that has no qemu of its own.
grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
  || { echo "test-arm64-chroot: qemu-aarch64 is registered without the F flag" >&2; exit 1; }

step "an arm64 bookworm (debootstrap --arch arm64 --foreign, second stage under qemu)"
tarball=$(scripts/bookworm-rootfs.sh --arch arm64 --include systemd)
root=target/arm64-chroot/root
rm -rf target/arm64-chroot
unpack_rootfs "$tarball" "$root"
cp "$deb" "$root/tmp/osprey.deb"
cp tests/packaging/in-chroot.sh "$root/root/in-chroot.sh"
port=$(free_port)
in_chroot() { run_in_chroot 900 "$root" in-chroot.sh "$@"; }
echo "chroot: $(chroot "$root" dpkg --print-architecture), $(chroot "$root" uname -m) (emulated), $(cat "$root/etc/debian_version")"
file "$root/bin/bash" | cut -d, -f1-2

step "in the chroot: dpkg -i, the files, systemd-analyze verify, osprey --version, osprey demo on port $port"
in_chroot install "$port"
file "$root/usr/bin/osprey" | cut -d, -f1-2

step "in the chroot: dpkg --purge, nothing left"
in_chroot purge
rm -rf target/arm64-chroot
step "passed"
