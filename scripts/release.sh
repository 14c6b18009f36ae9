#!/usr/bin/env bash
# A release from one command, into DIR (default target/release-VERSION):
#
#   scripts/release.sh [--out DIR]             builds both architectures and
#                                              assembles everything below
#   scripts/release.sh --debs DIR2 [--out DIR] assembles from the two .debs
#                                              in DIR2 instead of building
#   scripts/release.sh --verify-reproducible   the release built twice, from
#                                              HEAD unpacked in two
#                                              directories one after the
#                                              other: the two SHA256SUMS
#                                              must be equal
#   --arch amd64|arm64                         (with any of the above) one
#                                              architecture only: its .deb
#                                              and tarball, no OCI image
#                                              (which holds both); half the
#                                              build time
#
# What DIR gets:
#   osprey_VERSION_amd64.deb, osprey_VERSION_arm64.deb   (scripts/package.sh)
#   osprey-VERSION-x86_64-linux.tar.gz, -aarch64-linux.tar.gz
#       the packages' binaries, README.md, CHANGELOG.md, the systemd unit
#       and the example config, in osprey-VERSION-ARCH-linux/
#   osprey-VERSION-oci.tar
#       an OCI image layout, archived (podman manifest push --all): the Dockerfile's
#       runtime stage for linux/amd64 and linux/arm64 under one index,
#       its arm64 image started under qemu (binfmt_misc) to serve the demo
#       before it is written. OCI configs have no HEALTHCHECK: `docker
#       run --health-cmd "osprey ping"` gives it back
#   SHA256SUMS, and SHA256SUMS.asc when OSPREY_RELEASE_KEY names a gpg
#       key (gpg --local-user; GNUPGHOME chooses the keyring): a detached,
#       armored signature
#
# Reproducible: SOURCE_DATE_EPOCH (the last commit's time unless set)
# dates every file of the packages, tarballs and image layers; the
# tarballs are sorted with fixed owners and no pax times, gzip -n; the
# build's paths are remapped (--remap-path-prefix, -ffile-prefix-map) to
# /osprey, /target, /cargo and /rustc, so the checkout's directory leaves
# no trace. The build uses its own target directory, target/release-build:
# those flags and SOURCE_DATE_EPOCH (which cc-rs declares it reads) change
# every crate's fingerprint, RocksDB's C++ included, so a release build
# shares nothing with target/release and its first run compiles RocksDB
# for both architectures (about an hour on 2 cores; --verify-reproducible
# does that twice). The images' base is scripts/bookworm-rootfs.sh's
# debootstrap of the week (no registry is reachable here); a base made
# again is not the same bytes, so the OCI archive is reproducible only
# from the same base. Needs root (podman, apt for the cross toolchain).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== release [${SECONDS}s]: $*" >&2; }
fail() { echo "release: FAILED: $*" >&2; exit 1; }

out="" debs="" verify="" archs="amd64 arm64" arch_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --debs) debs=$(cd "$2" && pwd); shift 2 ;;
    --verify-reproducible) verify=yes; shift ;;
    --arch)
      case "$2" in amd64|arm64) archs="$2"; arch_args=(--arch "$2") ;; *) fail "--arch takes amd64 or arm64" ;; esac
      shift 2 ;;
    *) echo "usage: $0 [--out DIR] [--debs DIR] [--arch amd64|arm64] | --verify-reproducible [--arch A]" >&2; exit 2 ;;
  esac
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH TZ=UTC LC_ALL=C

if [ -n "$verify" ]; then
  [ -z "$(git status --porcelain --untracked-files=no)" ] || fail "commit first: both builds are of HEAD"
  sums=()
  for n in 1 2; do
    dir=$(mktemp -d "/tmp/osprey-release-$n-XXXXXX")
    step "build $n of $(git rev-parse --short HEAD) in $dir"
    git archive HEAD | tar -x -C "$dir"
    # Unsigned: the signature is over SHA256SUMS, which is what is compared.
    (cd "$dir" && env -u OSPREY_RELEASE_KEY scripts/release.sh --out "$dir/out" "${arch_args[@]}") || fail "build $n"
    sums+=("$dir/out/SHA256SUMS")
  done
  if diff -u "${sums[0]}" "${sums[1]}"; then
    echo "reproducible: both builds give SHA256SUMS $(sha256sum <"${sums[0]}" | cut -c1-16)"
  else
    fail "the two builds differ (above); both are kept: ${sums[*]%/out/SHA256SUMS}"
  fi
  exit 0
fi

out=${out:-target/release-$version}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/osprey-release-work-XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ -n "$debs" ]; then
  step "the packages from $debs (not built here)"
  for arch in $archs; do
    cp "$debs/osprey_${version}_$arch.deb" "$out/"
  done
else
  target="$PWD/target/release-build"
  cargo_home=${CARGO_HOME:-$HOME/.cargo}
  sysroot=$(rustc --print sysroot)
  maps=("$PWD=/osprey" "$target=/target" "$cargo_home=/cargo" "$sysroot=/rustc")
  rustflags="" cflags=""
  for map in "${maps[@]}"; do
    rustflags+=" --remap-path-prefix=$map"
    cflags+=" -ffile-prefix-map=$map"
  done
  for arch in $archs; do
    step "scripts/package.sh --arch $arch (in target/release-build)"
    CARGO_TARGET_DIR="$target" RUSTFLAGS="${rustflags# }" CFLAGS="${cflags# }" CXXFLAGS="${cflags# }" \
      scripts/package.sh --arch "$arch" --out "$out" >&2
  done
fi

step "tarballs"
for arch in $archs; do
  case "$arch" in amd64) cpu=x86_64 ;; arm64) cpu=aarch64 ;; esac
  name="osprey-$version-$cpu-linux"
  rm -rf "${work:?}/$name" "$work/deb"
  dpkg-deb -x "$out/osprey_${version}_$arch.deb" "$work/deb"
  install -d "$work/$name"
  install -m 0755 "$work/deb/usr/bin/osprey" "$work/deb/usr/bin/osprey-tools" "$work/$name/"
  install -m 0644 README.md CHANGELOG.md contrib/osprey.service contrib/osprey.toml.example "$work/$name/"
  tar -C "$work" --sort=name --format=gnu --mtime="@$SOURCE_DATE_EPOCH" \
    --owner=0 --group=0 --numeric-owner -cf - "$name" | gzip -9n >"$out/$name.tar.gz"
  mkdir -p "$work/binaries-$arch/usr/local/bin"
  cp "$work/$name/osprey" "$work/$name/osprey-tools" "$work/binaries-$arch/usr/local/bin/"
done

if [ "$archs" != "amd64 arm64" ]; then
  step "no OCI image: it holds both architectures, and --arch builds one"
else
step "the OCI image (linux/amd64 and linux/arm64)"
image="localhost/osprey-release:$version"
podman manifest rm "$image" >/dev/null 2>&1 || true
podman manifest create "$image" >/dev/null
for arch in amd64 arm64; do
  tarball=$(scripts/bookworm-rootfs.sh --arch "$arch")
  base="localhost/osprey-release-base:$(basename "$tarball" .tar.gz)"
  podman image exists "$base" || podman import --quiet --arch "$arch" "$tarball" "$base" >/dev/null
  tar -C "$work/binaries-$arch" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 \
    --numeric-owner -cf "$work/binaries-$arch.tar" .
  binaries="localhost/osprey-release-binaries:$version-$arch"
  podman import --quiet --arch "$arch" "$work/binaries-$arch.tar" "$binaries" >/dev/null
  # --timestamp: the image's creation time and its layers' file times;
  # no intermediate images, whose IDs would be named in the history.
  # (This removes the BINARIES image, imported again for each build.)
  podman build --format docker --isolation chroot --platform "linux/$arch" --layers=false --omit-history \
    --timestamp "$SOURCE_DATE_EPOCH" --build-arg "RUNTIME_IMAGE=$base" --build-arg "BINARIES=$binaries" \
    -t "$image-$arch" . >"$work/build-$arch.log" 2>&1 || { cat "$work/build-$arch.log" >&2; fail "podman build $arch"; }
  podman manifest add "$image" "containers-storage:$image-$arch" >/dev/null
done

step "the arm64 image serves the demo under qemu"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
name="osprey-release-demo-$$"
podman run -d --name "$name" --runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
  --network host --stop-signal SIGINT --entrypoint osprey "$image-arm64" \
  demo --electrum-rpc-addr "127.0.0.1:$port" >/dev/null 2>"$work/demo.log" || { cat "$work/demo.log" >&2; fail "podman run"; }
trap 'podman rm -f -t 0 "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
[ "$(podman exec "$name" uname -m)" = aarch64 ] || fail "the arm64 image does not run as aarch64"
# The port opens while the demo indexes: ask until the tip is served.
answer="" tip=""
for _ in $(seq 600); do
  if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
    printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"server.version","params":["release","1.4"]}' \
      '{"jsonrpc":"2.0","id":2,"method":"blockchain.headers.subscribe","params":[]}' >&3
    read -r -t 30 answer <&3 || true
    read -r -t 30 tip <&3 || true
    exec 3<&-
    [[ "$tip" == *'"result":{"height":'* ]] && break
  fi
  [ "$(podman inspect --format '{{.State.Running}}' "$name")" = true ] || { podman logs "$name" >&2; fail "the arm64 demo exited"; }
  sleep 1
done
echo "arm64 image (aarch64 under qemu), server.version: $answer; tip: ${tip:0:60}..." >&2
[[ "$answer" == *'"result":["Osprey '"$version"'","1.4"]'* && "$tip" == *'"result":{"height":'* ]] \
  || { podman logs "$name" >&2; fail "the arm64 demo did not serve its tip"; }
podman rm -f -t 0 "$name" >/dev/null
# An OCI layout directory, archived here: podman's oci-archive dates its
# entries by the clock.
podman manifest push --all --format oci "$image" "oci:$work/oci:$version" >/dev/null 2>"$work/push.log" \
  || { cat "$work/push.log" >&2; fail "podman manifest push"; }
tar -C "$work/oci" --sort=name --format=gnu --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 \
  --numeric-owner -cf "$out/osprey-$version-oci.tar" .
fi

step "SHA256SUMS"
(cd "$out" && rm -f SHA256SUMS SHA256SUMS.asc && sha256sum osprey_* osprey-* >SHA256SUMS)
if [ -n "${OSPREY_RELEASE_KEY:-}" ]; then
  gpg --batch --yes --local-user "$OSPREY_RELEASE_KEY" --armor --detach-sign \
    --output "$out/SHA256SUMS.asc" "$out/SHA256SUMS"
  gpg --batch --verify "$out/SHA256SUMS.asc" "$out/SHA256SUMS" >&2
fi
cat "$out/SHA256SUMS"
step "done: $out"
