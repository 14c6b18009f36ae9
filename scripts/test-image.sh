#!/usr/bin/env bash
# Builds the Dockerfile's runtime stage with podman, as the container
# tests run it, and prints the image's name (localhost/osprey-test:latest):
#
#   image=$(scripts/test-image.sh)
#
# Only package registries are reachable here, so neither rust:1-bookworm
# nor debian:bookworm-slim can be pulled. The build takes its base from
# scripts/bookworm-rootfs.sh (debootstrap minbase, what bookworm-slim is
# made of) and its binaries from the amd64 .deb (scripts/package.sh, run
# when target/debian has none) instead of the builder stage, through the
# Dockerfile's RUNTIME_IMAGE and BINARIES arguments. The builder stage (a
# 20-30 minute RocksDB compile) is not run here. Installs podman and runc
# with apt if missing. Progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test-image: installing ${need_apt[*]} with apt-get" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
deb="target/debian/osprey_${version}_$(dpkg --print-architecture).deb"
[ -s "$deb" ] || scripts/package.sh --out target/debian >&2
work=target/test-image
rm -rf "$work"
mkdir -p "$work/binaries/usr/local/bin"

tarball=$(scripts/bookworm-rootfs.sh)
base="localhost/osprey-test-base:$(basename "$tarball" .tar.gz)"
podman image exists "$base" || podman import --quiet "$tarball" "$base" >/dev/null
dpkg-deb -x "$deb" "$work/deb"
cp "$work/deb/usr/bin/osprey" "$work/deb/usr/bin/osprey-tools" "$work/binaries/usr/local/bin/"
tar -C "$work/binaries" -cf "$work/binaries.tar" .
podman import --quiet "$work/binaries.tar" localhost/osprey-test-binaries:latest >/dev/null

# Docker format: OCI images have no HEALTHCHECK. The build's RUN steps
# (useradd) use chroot isolation: buildah sets the process limit itself,
# which root without CAP_SYS_RESOURCE (some VMs) cannot raise.
image=localhost/osprey-test:latest
podman build --format docker --isolation chroot \
  --build-arg "RUNTIME_IMAGE=$base" --build-arg BINARIES=localhost/osprey-test-binaries:latest \
  -t "$image" . >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
rm -rf "$work"
echo "$image"
