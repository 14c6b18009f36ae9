#!/usr/bin/env bash
# Osprey's main job in one command. With a node (a cookie file in
# ~/.bitcoin, or an osprey.toml / OSPREY_* settings) it indexes that node's
# chain and serves Electrum wallets; with no node at hand it runs
# `osprey demo`: a generated regtest chain, indexed and served.
# Extra arguments go to `osprey serve` (e.g. --network signet).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -p osprey -p osprey-tools
bin=target/release/osprey
network_dir=""
for arg in "$@"; do case "$arg" in --network=*) network_dir="${arg#--network=}";; esac; done
if [ -f osprey.toml ] || [ -n "${OSPREY_DAEMON_RPC_ADDR:-}${OSPREY_AUTH:-}${OSPREY_COOKIE_FILE:-}" ] \
   || [ -f "$HOME/.bitcoin/.cookie" ] || [ -n "$network_dir" ] || [ $# -gt 0 ]; then
  exec "$bin" serve "$@"
fi
echo "run: no Bitcoin node found (no ~/.bitcoin/.cookie, osprey.toml or OSPREY_* settings): starting the demo"
exec "$bin" demo
