#!/usr/bin/env bash
# The package's upgrade path, on a clean bookworm (a chroot, as
# scripts/test-deb.sh makes it) against a regtest Bitcoin Core:
#
#   scripts/test-deb-upgrade.sh [--old-binaries DIR]
#
# 1. The package of the last commit before the index format changed (the
#    last change of SCHEMA_VERSION in crates/store/src/lib.rs), made by
#    that commit's own scripts/package.sh, is installed; the operator
#    edits /etc/osprey/osprey.toml; Osprey indexes the chain and serves
#    its tip.
# 2. This commit's package is installed over it: the operator's config is
#    kept (a conffile), and the index of the previous format is rebuilt
#    by itself (the log says so, the index is a new one) and serves the
#    tip.
# 3. A later package of the same format (this one, its version raised) is
#    installed over that: the index is kept, not rebuilt (same RocksDB
#    identity, no rebuild line), and serves the new tip.
#
# The old package's binaries are built from its commit (a full build,
# RocksDB included: 25+ minutes), or taken from --old-binaries DIR
# (osprey and osprey-tools built from it; `osprey --version` must name
# the previous format), packaged by the old package.sh with cargo
# replaced by a no-op. Both old and new carry the workspace's version:
# the old package is repacked as VERSION~prev and the third as
# VERSION+same so that dpkg sees upgrades. Needs root (chroot, mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== test-deb-upgrade [${SECONDS}s]: $*"; }
fail() { echo "test-deb-upgrade: FAILED: $*" >&2; exit 1; }
old_binaries=""
case "${1:-}" in
  --old-binaries) old_binaries=$(cd "$2" && pwd) ;;
  "") ;;
  *) echo "usage: $0 [--old-binaries DIR]" >&2; exit 2 ;;
esac
repo=$(pwd)
bitcoind=${BITCOIND_EXE:-$(command -v bitcoind || echo ../shared/peers/bin/bitcoind)}
bitcoin_cli="$(dirname "$bitcoind")/bitcoin-cli"
. scripts/chroot.sh

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
format=$(sed -n 's/^pub const SCHEMA_VERSION: u32 = \([0-9]*\);/\1/p' crates/store/src/lib.rs)
changed=$(git log -1 --format=%H -G'pub const SCHEMA_VERSION: u32' -- crates/store/src/lib.rs)
old_commit=$(git rev-parse "$changed^")
old_format=$(git show "$old_commit:crates/store/src/lib.rs" | sed -n 's/^pub const SCHEMA_VERSION: u32 = \([0-9]*\);/\1/p')
echo "this commit: format $format; the previous format, $old_format, last at $(git log -1 --format='%h (%cs)' "$old_commit")"

work=$(mktemp -d /tmp/osprey-upgrade-XXXXXX)
core_pid=""
cleanup() {
  [ -z "$core_pid" ] || { kill "$core_pid" 2>/dev/null; wait "$core_pid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT

step "this commit's package (scripts/package.sh)"
scripts/package.sh --out target/debian >"$work/package-new.log" 2>&1 || { tail -20 "$work/package-new.log"; fail "package.sh"; }
new_deb="target/debian/osprey_${version}_amd64.deb"

step "the previous format's package (package.sh of $(git rev-parse --short "$old_commit"))"
mkdir -p "$work/old-src"
git archive "$old_commit" | tar -x -C "$work/old-src"
if [ -n "$old_binaries" ]; then
  "$old_binaries/osprey" --version | grep -q "(index format $old_format)\$" \
    || fail "$old_binaries/osprey is not format $old_format: $("$old_binaries/osprey" --version)"
  mkdir -p "$work/old-target/release" "$work/no-cargo"
  cp "$old_binaries/osprey" "$old_binaries/osprey-tools" "$work/old-target/release/"
  printf '#!/bin/sh\n# The binaries are built already (--old-binaries).\nexit 0\n' >"$work/no-cargo/cargo"
  chmod +x "$work/no-cargo/cargo"
  (cd "$work/old-src" && PATH="$work/no-cargo:$PATH" CARGO_TARGET_DIR="$work/old-target" \
    scripts/package.sh --out "$work/old-deb") >"$work/package-old.log" 2>&1 \
    || { tail -20 "$work/package-old.log"; fail "the old package.sh"; }
else
  (cd "$work/old-src" && scripts/package.sh --out "$work/old-deb") >"$work/package-old.log" 2>&1 \
    || { tail -20 "$work/package-old.log"; fail "the old package.sh"; }
fi

# The same package under another version.
repack() {
  local deb=$1 as=$2 out=$3 dir="$work/repack"
  rm -rf "$dir"
  dpkg-deb -R "$deb" "$dir"
  sed -i "s/^Version: .*/Version: $as/" "$dir/DEBIAN/control"
  dpkg-deb --root-owner-group -Zxz -b "$dir" "$out" >/dev/null
}
repack "$work/old-deb/osprey_${version}_amd64.deb" "$version~prev" "$work/old.deb"
cp "$new_deb" "$work/new.deb"
repack "$new_deb" "$version+same" "$work/same.deb"

step "Bitcoin Core (regtest) and a chain"
core_dir="$work/core"
mkdir -p "$core_dir"
rpc_port=$(free_port)
password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
"$bitcoind" -regtest -datadir="$core_dir" -rpcport="$rpc_port" -port="$(free_port)" -listen=0 \
  -rpcbind=127.0.0.1 -rpcallowip=127.0.0.1 -rpcuser=osprey "-rpcpassword=$password" -rest=1 \
  -fallbackfee=0.0002 >"$work/core.log" 2>&1 &
core_pid=$!
cli() { "$bitcoin_cli" -regtest -datadir="$core_dir" -rpcport="$rpc_port" -rpcuser=osprey "-rpcpassword=$password" "$@"; }
for _ in $(seq 120); do
  cli getblockchaininfo >/dev/null 2>&1 && break
  kill -0 "$core_pid" 2>/dev/null || { tail -20 "$work/core.log"; fail "bitcoind exited"; }
  sleep 0.5
done
cli -named createwallet wallet_name=miner >/dev/null
mine() { cli generatetoaddress "$1" "$(cli getnewaddress)" >/dev/null; cli getblockcount; }
height=$(mine 150)
echo "bitcoind $("$bitcoind" -version | head -1 | sed 's/.*version \([^ ]*\).*/\1/') on 127.0.0.1:$rpc_port, height $height"

step "a clean bookworm"
tarball=$(scripts/bookworm-rootfs.sh --include systemd)
root="$work/root"
unpack_rootfs "$tarball" "$root"
cp "$work/old.deb" "$work/new.deb" "$work/same.deb" "$root/tmp/"
cp tests/packaging/upgrade-in-chroot.sh "$root/root/"
port=$(free_port)
in_chroot() { run_in_chroot 600 "$root" upgrade-in-chroot.sh "$@"; }
index="$root/var/lib/osprey/db/regtest"
identity() { cat "$index/rocksdb/IDENTITY" 2>/dev/null || echo none; }
rebuild_line="indexing again"

step "1. the format-$old_format package: install, configure, index, serve"
in_chroot install /tmp/old.deb "$old_format"
in_chroot configure "127.0.0.1:$rpc_port" "osprey:$password" "$port"
in_chroot serve "$height" "$port"
old_identity=$(identity)
[ "$old_identity" != none ] || fail "no RocksDB index at /var/lib/osprey/db/regtest"
echo "index: RocksDB identity $old_identity"

step "2. upgrade to this commit's package (format $format): config kept, index rebuilt by itself"
height=$(mine 5)
in_chroot install /tmp/new.deb "$format"
in_chroot serve "$height" "$port"
log="$root/root/serve-2.log"
grep -m1 "$rebuild_line" "$log" || { tail -20 "$log"; fail "no rebuild line in the log after the format change"; }
new_identity=$(identity)
[ "$new_identity" != "$old_identity" ] || fail "the index was not rebuilt (same RocksDB identity)"
echo "index: rebuilt (RocksDB identity $old_identity -> $new_identity), serving height $height"

step "3. upgrade to a later package of format $format: config kept, index kept"
height=$(mine 5)
in_chroot install /tmp/same.deb "$format"
in_chroot serve "$height" "$port"
log="$root/root/serve-3.log"
if grep -m1 "$rebuild_line" "$log"; then
  fail "the index was rebuilt although its format did not change"
fi
[ "$(identity)" = "$new_identity" ] || fail "the index changed identity: $(identity)"
echo "index: kept (RocksDB identity $new_identity), caught up to height $height"
step "passed"
