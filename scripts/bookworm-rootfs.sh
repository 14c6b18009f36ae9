#!/usr/bin/env bash
# Prints the path of a minimal Debian bookworm as a tarball, a clean machine
# for the package and container tests:
#
#   scripts/bookworm-rootfs.sh                    # debootstrap --variant=minbase,
#                                                 # what debian:bookworm-slim is made of
#   scripts/bookworm-rootfs.sh --include systemd  # and these packages (comma-separated)
#   scripts/bookworm-rootfs.sh --arch arm64 ...   # another architecture: debootstrap
#                                                 # --foreign, its second stage run
#                                                 # under qemu-user-static (binfmt_misc)
#
# Made with debootstrap from the mirror apt uses here, and kept in
# target/rootfs/ for the ISO week (a week-old one is made again: the tests
# see the week's point-release updates).
set -euo pipefail
cd "$(dirname "$0")/.."

include=""
arch=$(dpkg --print-architecture)
host_arch=$arch
while [ $# -gt 0 ]; do
  case "$1" in
    --include) include="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    *) echo "usage: $0 [--arch ARCH] [--include PKG,...]" >&2; exit 2 ;;
  esac
done
foreign=""
[ "$arch" = "$host_arch" ] || foreign=yes
name="bookworm${foreign:+-$arch}-minbase${include:+-${include//,/-}}"
cache=target/rootfs
tarball="$cache/$name-$(date -u +%G-w%V).tar.gz"
if [ -s "$tarball" ]; then
  echo "$tarball"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "rootfs: installing debootstrap with apt-get" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debootstrap >/dev/null
fi
# The first Debian mirror in apt's sources (deb822 or one-line format).
mirror=$( { cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } \
  | sed -n -e 's|^URIs: *\(https\?://[^ ]*/debian\)/\?$|\1|p' \
      -e 's|^deb \(\[[^]]*\] \)\?\(https\?://[^ ]*/debian\)/\? .*|\2|p' | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
dir="$cache/$name.tmp"
rm -rf "$dir"
mkdir -p "$dir"
echo "rootfs: debootstrap --variant=minbase${foreign:+ --arch=$arch --foreign}${include:+ --include=$include} bookworm from $mirror (a minute or two, once a week${foreign:+; the emulated second stage takes longer})" >&2
debootstrap --variant=minbase ${foreign:+"--arch=$arch" --foreign} ${include:+"--include=$include"} bookworm "$dir" "$mirror" \
  >"$cache/$name.log" 2>&1 || { tail -20 "$cache/$name.log" >&2; exit 1; }
if [ -n "$foreign" ]; then
  # The target's own binaries finish the install, run through
  # binfmt_misc (qemu-user-static registers its interpreters with the F
  # flag: they work inside a chroot without being copied into it).
  chroot "$dir" /debootstrap/debootstrap --second-stage \
    >>"$cache/$name.log" 2>&1 || { tail -20 "$cache/$name.log" >&2; exit 1; }
fi
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
rm -f "$cache/$name"-[0-9]*.tar.gz
tar -C "$dir" --numeric-owner -czf "$tarball.tmp" .
mv "$tarball.tmp" "$tarball"
rm -rf "$dir"
echo "$tarball"
