#!/usr/bin/env bash
# Prints the path of a minimal Debian bookworm as a tarball, a clean machine
# for the package and container tests:
#
#   scripts/bookworm-rootfs.sh                    # debootstrap --variant=minbase,
#                                                 # what debian:bookworm-slim is made of
#   scripts/bookworm-rootfs.sh --include systemd  # and these packages (comma-separated)
#
# Made with debootstrap from the mirror apt uses here, and kept in
# target/rootfs/ for the ISO week (a week-old one is made again: the tests
# see the week's point-release updates).
set -euo pipefail
cd "$(dirname "$0")/.."

include=""
case "${1:-}" in
  --include) include="$2" ;;
  "") ;;
  *) echo "usage: $0 [--include PKG,...]" >&2; exit 2 ;;
esac
name="bookworm-minbase${include:+-${include//,/-}}"
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
echo "rootfs: debootstrap --variant=minbase${include:+ --include=$include} bookworm from $mirror (a minute or two, once a week)" >&2
debootstrap --variant=minbase ${include:+"--include=$include"} bookworm "$dir" "$mirror" \
  >"$cache/$name.log" 2>&1 || { tail -20 "$cache/$name.log" >&2; exit 1; }
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
rm -f "$cache/$name"-[0-9]*.tar.gz
tar -C "$dir" --numeric-owner -czf "$tarball.tmp" .
mv "$tarball.tmp" "$tarball"
rm -rf "$dir"
echo "$tarball"
