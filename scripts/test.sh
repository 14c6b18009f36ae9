#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs
# (clang for RocksDB, btcd for the functional tests), then checks
# formatting and lints, runs every unit, integration and functional test,
# and runs the functional suite again with 1-byte key prefixes so that
# prefix collisions are everywhere (answers must not change).
set -euo pipefail
# Everything builds with the release profile: one RocksDB compile serves the
# tests, the benchmarks and `scripts/run.sh`.
cd "$(dirname "$0")/.."
scripts/setup.sh --btcd
export PATH="$PATH:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets -- -D warnings
echo "== cargo test (workspace)"
cargo test --release --workspace
echo "== cargo test --features short-prefixes (oracle and functional suites with 1-byte prefixes)"
cargo test --release --features osprey-store/short-prefixes -p osprey-query --test oracle
cargo test --release --features short-prefixes --test it
