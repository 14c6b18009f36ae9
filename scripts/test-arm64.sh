#!/usr/bin/env bash
# The arm64 package against the amd64 one, by hand (not in CI: the first
# arm64 build compiles RocksDB for aarch64, 30+ minutes on 2 cores):
#
#   scripts/test-arm64.sh [--no-build] [SEED]
#
# Builds both .debs with scripts/package.sh (--no-build: takes the ones
# already in target/debian), unpacks them, runs the arm64
# `osprey demo` (and the arm64 osprey-tools it starts) under qemu user
# emulation (qemu-user-static, through binfmt_misc, with the aarch64 cross
# libraries as its root for the dynamic loader) and the amd64 demo with
# the same seed, asks both the same questions about every block, wallet
# script and wallet transaction (scripts/electrum_answers.py) and compares
# the answers byte for byte. Needs root (apt, binfmt_misc).
set -euo pipefail
cd "$(dirname "$0")/.."
build=yes
seed=1
for arg in "$@"; do
  case "$arg" in
    --no-build) build="" ;;
    *) seed="$arg" ;;
  esac
done
step() { echo "== test-arm64 [${SECONDS}s]: $*"; }

need_apt=()
command -v qemu-aarch64-static >/dev/null 2>&1 || need_apt+=(qemu-user-static)
command -v update-binfmts >/dev/null 2>&1 || need_apt+=(binfmt-support)
command -v lintian >/dev/null 2>&1 || need_apt+=(lintian)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test-arm64: installing ${need_apt[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# The demo execs osprey-tools itself: only binfmt_misc lets an emulated
# process start another arm64 binary.
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

if [ -n "$build" ]; then
  step "scripts/package.sh --arch arm64 (the first build takes 30+ minutes)"
  scripts/package.sh --arch arm64 --out target/debian
  step "scripts/package.sh --arch amd64"
  scripts/package.sh --arch amd64 --out target/debian
fi
step "lintian on the arm64 package"
lintian --fail-on error,warning --tag-display-limit 0 "target/debian/osprey_${version}_arm64.deb"
work=target/arm64-test
rm -rf "$work"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for arch in arm64 amd64; do
  mkdir -p "$work/$arch/root"
  dpkg-deb -x "target/debian/osprey_${version}_$arch.deb" "$work/$arch/root"
  file -L "$work/$arch/root/usr/bin/osprey" | cut -d, -f1-2
  "$work/$arch/root/usr/bin/osprey" --version
  port=$(free_port)
  step "$arch: osprey demo --seed $seed on port $port"
  start=$SECONDS
  "$work/$arch/root/usr/bin/osprey" demo --seed "$seed" --dir "$work/$arch/demo" \
    --electrum-rpc-addr "127.0.0.1:$port" >"$work/$arch/demo.log" 2>&1 &
  pids+=($!)
  echo "$arch: osprey runs as $(readlink "/proc/${pids[-1]}/exe")"
  # The manifest appears before the index: wait for the chain first.
  for _ in $(seq 600); do [ -s "$work/$arch/demo/chain/manifest.json" ] && break; sleep 1; done
  scripts/electrum_answers.py --port "$port" --wait 600 \
    --manifest "$work/$arch/demo/chain/manifest.json" --out "$work/$arch/answers.txt"
  echo "$arch: served and answered $((SECONDS - start)) s after the start"
  kill -INT "${pids[-1]}"
  wait "${pids[-1]}" || { cat "$work/$arch/demo.log"; echo "the $arch demo failed" >&2; exit 1; }
  grep '^Osprey demo:' "$work/$arch/demo.log"
done

step "comparing"
cmp "$work/arm64/demo/chain/manifest.json" "$work/amd64/demo/chain/manifest.json"
echo "the two chains' manifests are identical"
if cmp "$work/arm64/answers.txt" "$work/amd64/answers.txt"; then
  echo "identical: $(wc -l <"$work/amd64/answers.txt") answers, $(wc -c <"$work/amd64/answers.txt") bytes, sha256 $(sha256sum <"$work/amd64/answers.txt" | cut -c1-16)"
else
  diff <(cut -f2 "$work/amd64/answers.txt") <(cut -f2 "$work/arm64/answers.txt") | head -20
  exit 1
fi
