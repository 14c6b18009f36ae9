#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs
# (clang for RocksDB, btcd for the functional tests), then checks
# formatting and lints, runs every unit, integration and functional test,
# runs the functional suite again with 1-byte key prefixes so that
# prefix collisions are everywhere (answers must not change), runs each
# fuzz target briefly, and installs the amd64 package on a clean Debian,
# runs the container image, and runs the Umbrel app's compose with it. By
# hand: the arm64 package (scripts/test-arm64.sh and
# scripts/test-arm64-chroot.sh: its cross build takes 30+ minutes) and the
# upgrade from the previous index format's package
# (scripts/test-deb-upgrade.sh: it builds that commit too).
set -euo pipefail
# Everything builds with the release profile: one RocksDB compile serves the
# tests, the benchmarks and `scripts/run.sh`.
cd "$(dirname "$0")/.."
scripts/setup.sh --btcd
export PATH="$PATH:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
# No test may pass by skipping: with CI set, a test that needs Bitcoin Core
# fails when bitcoind is missing instead of returning early. A person
# running this script gets what CI gets.
export CI=1
# Both nodes, checked here so that a missing one stops the run at once with
# one clear message rather than failing tests an hour in. Where the tests
# look (crates/testenv/src/node.rs): $BITCOIND_EXE (or $OSPREY_BITCOIND),
# the PATH, then ../shared/peers/bin/bitcoind; $OSPREY_BTCD, then the PATH.
bitcoind_exe=${BITCOIND_EXE:-${OSPREY_BITCOIND:-}}
if [ -z "$bitcoind_exe" ]; then
  bitcoind_exe=$(command -v bitcoind || echo ../shared/peers/bin/bitcoind)
fi
if ! "$bitcoind_exe" --version >/dev/null 2>&1; then
  echo "test.sh: Bitcoin Core's bitcoind does not run ($bitcoind_exe): set BITCOIND_EXE to a Bitcoin Core 30+ bitcoind, or put one on the PATH; the Core tests are required, not skipped" >&2
  exit 1
fi
btcd_exe=${OSPREY_BTCD:-$(command -v btcd || echo btcd)}
if ! "$btcd_exe" --version >/dev/null 2>&1; then
  echo "test.sh: btcd does not run ($btcd_exe): install it with \`go install github.com/btcsuite/btcd@v0.24.2\` (scripts/setup.sh --btcd) or set OSPREY_BTCD" >&2
  exit 1
fi
# The disk-full tests (the store's unit test, tests/it/disk_full.rs) fill a
# tmpfs of their own: mounting one needs root, and a C compiler builds the
# EIO shim of tests/it/io_errors.rs.
if [ "$(id -u)" != 0 ]; then
  echo "test.sh: the disk-full tests mount a tmpfs and need root; run as root (they fail, not skip, otherwise)" >&2
  exit 1
fi
# Each phase says when it starts, so a slow CI run shows where time went.
phase() { echo "== [$(date -u +%T), ${SECONDS}s] $*"; }

phase "cargo fmt --check"
cargo fmt --all -- --check
phase "cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets -- -D warnings
phase "cargo build osprey-tools (the functional tests run \`osprey chaingen\` and \`osprey bench\`)"
cargo build --release -p osprey -p osprey-tools
phase "the server binary links no instrument"
if cargo tree -e normal -p osprey --prefix none | grep -E "^osprey-(bench|chaingen) "; then
  echo "osprey links the benchmark client or the chain generator" >&2
  exit 1
fi
phase "packages: the amd64 .deb on a clean bookworm, the container image, the Umbrel app (scripts/test-deb.sh, scripts/test-container.sh, scripts/test-umbrel.sh)"
# Here, while target/release holds the release build: the short-prefixes
# run below rebuilds the binaries with 1-byte prefixes. package.sh's own
# cargo build finds them up to date.
scripts/test-deb.sh
scripts/test-container.sh
scripts/test-umbrel.sh
phase "cargo check with the declared minimum Rust version"
# The workspace's rust-version, checked with that toolchain. RocksDB is not
# compiled a second time: the check links nothing, so the library the
# release build made is handed to librocksdb-sys as a prebuilt one.
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if rustup toolchain install "$msrv" --profile minimal >/dev/null 2>&1; then
  rocksdb_lib=$(dirname "$(find target/release/build -name librocksdb.a | head -1)")
  ROCKSDB_LIB_DIR="$rocksdb_lib" ROCKSDB_STATIC=1 \
    cargo "+$msrv" check --workspace --all-targets --target-dir target/msrv
else
  echo "test.sh: could not install Rust $msrv with rustup; the minimum version cannot be checked" >&2
  exit 1
fi
phase "cargo test (workspace)"
# No crate has doc examples: rustdoc is not run for none.
cargo test --release --workspace --lib --bins --tests
phase "cargo test --features short-prefixes (oracle and functional suites with 1-byte prefixes)"
cargo test --release --features osprey-store/short-prefixes -p osprey-query --test oracle
cargo test --release --features short-prefixes --test it
# That build left target/release/osprey a test build, whose index format
# differs (1-byte prefixes): link the release binaries back as users get
# them. Both variants are cached, so this only copies.
cargo build --release -p osprey -p osprey-tools
phase "fuzz: every cargo-fuzz target for 10 s from its seeds (scripts/fuzz.sh; longer runs by hand)"
FUZZ_SANITIZER=none scripts/fuzz.sh 10
phase "done"
