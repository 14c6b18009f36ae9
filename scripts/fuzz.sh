#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and runs each for SECONDS
# (default 20), one after the other, from the seeds in fuzz/corpus/<target>
# (what libFuzzer adds there is not committed). A crash stops the script;
# its input is in fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh [SECONDS]
#
# FUZZ_SANITIZER picks cargo-fuzz's sanitizer: `address` (the default, for
# runs by hand) or `none`, which `scripts/test.sh` uses for its brief run:
# a cold build without AddressSanitizer took 4 minutes on 2 cores, less
# than half as long, and each target's properties are checked all the same
# (AddressSanitizer adds checks of unsafe code, which the targets hardly
# reach).
#
# Needs the nightly toolchain (installed with rustup if missing) and
# cargo-fuzz (installed with `cargo install` if missing). RocksDB is not
# compiled again: the targets link the librocksdb.a of the release build
# (`cargo build --release`, which this script runs first if there is none),
# as scripts/test.sh does for its minimum-version check.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
sanitizer=${FUZZ_SANITIZER:-address}
# One target directory per sanitizer, so that switching rebuilds nothing.
fuzz_target_dir=fuzz/target
[ "$sanitizer" = address ] || fuzz_target_dir="fuzz/target/sanitizer-$sanitizer"
fuzz=(cargo +nightly fuzz)

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "== installing the nightly toolchain (cargo-fuzz needs it)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

target_dir=${CARGO_TARGET_DIR:-target}
find_rocksdb() { find "$target_dir/release/build" -name librocksdb.a 2>/dev/null | head -1; }
if [ -z "$(find_rocksdb)" ]; then
  echo "== no librocksdb.a yet: building osprey-store (compiles RocksDB once)"
  cargo build --release -p osprey-store
fi
ROCKSDB_LIB_DIR=$(cd "$(dirname "$(find_rocksdb)")" && pwd)
export ROCKSDB_LIB_DIR ROCKSDB_STATIC=1
# The fuzz crate is a workspace of its own with its own target directory
# (fuzz/target): the sanitizer flags must not reach the main build.
unset CARGO_TARGET_DIR

echo "== cargo fuzz build (sanitizer: $sanitizer)"
"${fuzz[@]}" build -s "$sanitizer" --target-dir "$fuzz_target_dir"
for target in $("${fuzz[@]}" list); do
  echo "== cargo fuzz run $target (${seconds}s)"
  mkdir -p "fuzz/corpus/$target"
  # One process (no -jobs/-workers): the machine is shared. -timeout turns
  # a hang on one input into a failure instead of a stalled run.
  log="fuzz/artifacts/$target.log"
  mkdir -p fuzz/artifacts
  if ! "${fuzz[@]}" run "$target" -s "$sanitizer" --target-dir "$fuzz_target_dir" -- \
    -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    tail -40 "$log"
    echo "!!! $target failed: the input is in fuzz/artifacts/$target/, the log in $log" >&2
    exit 1
  fi
  # The last status line (executions, coverage, corpus) and the run's length.
  grep -aE '^#[0-9]+[[:space:]]+DONE|^Done [0-9]+ runs' "$log"
done
echo "== fuzz: every target ran ${seconds}s without a crash"
