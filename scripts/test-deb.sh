#!/usr/bin/env bash
# The package on a clean machine: builds this machine's .deb with
# scripts/package.sh (no rebuild when target/release is up to date), runs
# lintian on it, then in a chroot of a minimal Debian bookworm
# (scripts/bookworm-rootfs.sh) installs it with dpkg -i, checks the user,
# directories and files, has systemd-analyze verify the installed unit,
# runs `osprey --version` and `osprey demo` from the installed paths and
# asks the demo server.version over TCP, purges the package and checks
# that nothing of it is left. Needs root (chroot, mounts); scripts/test.sh
# runs it. Every step is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== test-deb [${SECONDS}s]: $*"; }
. scripts/chroot.sh

need_apt=()
command -v lintian >/dev/null 2>&1 || need_apt+=(lintian)
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test-deb: installing ${need_apt[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

step "scripts/package.sh"
scripts/package.sh --out target/debian
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
deb="target/debian/osprey_${version}_$(dpkg --print-architecture).deb"

step "lintian (overrides: packaging/lintian-overrides)"
lintian --fail-on error,warning --tag-display-limit 0 "$deb"

# With systemd (not running: postinst must cope), as a machine the
# service runs on has it: its systemd-analyze verifies the unit.
step "a clean bookworm"
tarball=$(scripts/bookworm-rootfs.sh --include systemd)
root=target/deb-test/root
rm -rf target/deb-test
unpack_rootfs "$tarball" "$root"
cp "$deb" "$root/tmp/osprey.deb"
cp tests/packaging/in-chroot.sh "$root/root/in-chroot.sh"
# The demo listens on a free loopback port (the chroot has the host's network).
port=$(free_port)
in_chroot() { run_in_chroot 300 "$root" in-chroot.sh "$@"; }

step "in the chroot: dpkg -i, the files, systemd-analyze verify, osprey --version, osprey demo on port $port"
in_chroot install "$port"

for bin in osprey osprey-tools; do
  if readelf -S --wide "$root/usr/bin/$bin" | grep -E ' \.(symtab|debug_[a-z]+) '; then
    echo "/usr/bin/$bin is not stripped" >&2
    exit 1
  fi
done

step "in the chroot: dpkg --purge, nothing left"
in_chroot purge
rm -rf target/deb-test
step "passed"
