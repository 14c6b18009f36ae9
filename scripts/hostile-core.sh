#!/usr/bin/env bash
# Runs scripts/hostile.py against `osprey serve` on Bitcoin Core regtest
# with a chain whose heaviest scripts hold 26,237 and 13,428 transactions
# (chaingen `medium`, seed 23: issue 25's setup), and stops everything.
#
#   scripts/hostile-core.sh OSPREY [--chain DIR] [HOSTILE_ARGS...]
#   e.g. scripts/hostile-core.sh target/release/osprey --json /tmp/hostile.json
#
# 1. The chain: DIR (default ${TMPDIR:-/tmp}/osprey-chaingen-medium-23) is
#    reused when DIR/manifest.json exists, else generated there with
#    `OSPREY chaingen --preset medium --seed 23` (needs osprey-tools beside
#    OSPREY; ~1 min of CPU, 417 MB) and kept for the next run.
# 2. Bitcoin Core ($BITCOIND, else ../shared/peers/bin/bitcoind beside the
#    repository, else bitcoind on PATH) imports a copy of its blk files with
#    -reindex (~2 min on 2 cores) in a temporary directory, and mines one
#    block so that it leaves initial block download.
# 3. `OSPREY serve` with default limits (plain TCP, plus TLS and WebSocket
#    listeners for the half-close phase) indexes the chain (~15 s) and is
#    waited for until it serves Core's tip: its memory is that of a server
#    that synced from scratch, as in the issue.
# 4. hostile.py attacks it with --pid, the manifest, --tls-server,
#    --ws-server and a --mine-cmd that mines a block on Core; its Markdown
#    table goes to stdout, HOSTILE_ARGS are passed on (e.g. --json OUT,
#    --phases, --phase-secs).
#
# Everything listens on 127.0.0.1, on free ports. The open-files limit is
# raised to the hard limit (osprey and hostile.py inherit it). On exit,
# even on failure or Ctrl-C, osprey and bitcoind are stopped by PID and the
# temporary directory is removed. Logs are printed if a step fails. Not in
# CI: about 10 minutes and 1 GB of disk.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
osprey=${1:?usage: hostile-core.sh OSPREY [--chain DIR] [HOSTILE_ARGS...]}
shift
osprey=$(realpath "$osprey")
chain=${TMPDIR:-/tmp}/osprey-chaingen-medium-23
if [ "${1:-}" = "--chain" ]; then
  chain=${2:?--chain needs a directory}
  shift 2
fi

# $BITCOIND / $BITCOIN_CLI, else the shared build beside the repository,
# else PATH.
find_tool() {
  local name=$1 variable=$2 shared=$here/../../shared/peers/bin/$1
  if [ -n "${!variable:-}" ]; then echo "${!variable}"
  elif [ -x "$shared" ]; then realpath "$shared"
  else command -v "$name" || { echo "hostile-core: no $name (set $variable)" >&2; exit 2; }
  fi
}
bitcoind=$(find_tool bitcoind BITCOIND)
bitcoin_cli=$(find_tool bitcoin-cli BITCOIN_CLI)

say() { echo "[hostile-core $(date +%H:%M:%S)] $*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/osprey-hostile-core.XXXXXX")
core_pid=""
osprey_pid=""

# Stops a process we started: SIGINT/SIGTERM first, SIGKILL after $2 seconds.
stop_pid() {
  local pid=$1 grace=$2 signal=$3
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill "-$signal" "$pid" 2>/dev/null || true
  for _ in $(seq $((grace * 10))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
  local status=$?
  stop_pid "$osprey_pid" 20 INT
  stop_pid "$core_pid" 60 TERM
  if [ "$status" -ne 0 ]; then
    for log in "$work"/*.log "$work"/core/regtest/debug.log; do
      [ -f "$log" ] && { echo "--- tail of $log" >&2; tail -n 20 "$log" >&2; }
    done
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ulimit -n "$(ulimit -Hn)"

# Five free loopback ports: Core's RPC and P2P, Electrum TCP, TLS, WebSocket.
read -r rpc_port p2p_port tcp_port tls_port ws_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')

if [ ! -f "$chain/manifest.json" ]; then
  say "generating chaingen medium seed 23 in $chain"
  nice -n 10 "$osprey" chaingen --preset medium --seed 23 --out "$chain"
fi
tip=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tip_height"])' "$chain/manifest.json")

datadir=$work/core
mkdir -p "$datadir/regtest/blocks"
# A copy: Core appends the blocks mined during the run to the last file.
cp --reflink=auto "$chain"/blocks/blk*.dat "$datadir/regtest/blocks/"
cat >"$datadir/bitcoin.conf" <<EOF
regtest=1
server=1
listen=0
dnsseed=0
fixedseeds=0
printtoconsole=0
[regtest]
rpcport=$rpc_port
port=$p2p_port
rpcbind=127.0.0.1
rpcallowip=127.0.0.1
EOF
cli=("$bitcoin_cli" "-datadir=$datadir" "-rpcport=$rpc_port")

say "Core imports $chain's blocks (tip $tip) with -reindex"
nice -n 10 "$bitcoind" "-datadir=$datadir" -reindex >"$work/bitcoind.log" 2>&1 &
core_pid=$!
deadline=$((SECONDS + 1800))
until [ "$("${cli[@]}" getblockcount 2>/dev/null || echo -1)" -ge "$tip" ]; do
  kill -0 "$core_pid" 2>/dev/null || { say "bitcoind exited during the import"; exit 1; }
  [ "$SECONDS" -lt "$deadline" ] || { say "Core did not reach height $tip in 30 min"; exit 1; }
  sleep 2
done
descriptor=$("${cli[@]}" getdescriptorinfo 'raw(51)' | python3 -c 'import json,sys; print(json.load(sys.stdin)["descriptor"])')
# The chain's blocks are dated 2017: Core is in initial block download
# until a block with a current time arrives.
"${cli[@]}" generatetodescriptor 1 "$descriptor" >/dev/null
mine_cmd="$(printf '%q ' "${cli[@]}") generatetodescriptor 1 $(printf '%q' "$descriptor")"

osprey_args=(--network regtest --db-dir "$work/db" --daemon-dir "$datadir"
  --cookie-file "$datadir/regtest/.cookie" --daemon-rpc-addr "127.0.0.1:$rpc_port" --skip-default-conf-files)
say "osprey serve on 127.0.0.1:$tcp_port (TLS $tls_port, WebSocket $ws_port) indexes"
"$osprey" serve "${osprey_args[@]}" --electrum-rpc-addr "127.0.0.1:$tcp_port" \
  --electrum-tls-addr "127.0.0.1:$tls_port" --electrum-ws-addr "127.0.0.1:$ws_port" >"$work/serve.log" 2>&1 &
osprey_pid=$!
core_tip=$("${cli[@]}" getblockcount)
# The height osprey serves (-1 until it serves wallets, after its initial
# sync). The tip alone is answered while the index is still being merged:
# a transaction by position is not, and hostile.py's discovery needs those.
served_height() {
  python3 - "$tcp_port" <<'PY' 2>/dev/null || echo -1
import json, socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as s:
    s.sendall(b'{"id":1,"method":"blockchain.headers.subscribe","params":[]}\n'
              b'{"id":2,"method":"blockchain.transaction.id_from_pos","params":[1,0]}\n')
    lines = s.makefile()
    height = json.loads(lines.readline())["result"]["height"]
    print(height if "result" in json.loads(lines.readline()) else -1)
PY
}
deadline=$((SECONDS + 600))
until [ "$(served_height)" -ge "$core_tip" ]; do
  kill -0 "$osprey_pid" 2>/dev/null || { say "osprey serve exited"; exit 1; }
  [ "$SECONDS" -lt "$deadline" ] || { say "osprey serve did not serve height $core_tip within 10 min"; exit 1; }
  sleep 1
done

say "load average before: $(cut -d' ' -f1-3 /proc/loadavg); hostile.py starts"
python3 "$here/hostile.py" --server "127.0.0.1:$tcp_port" --pid "$osprey_pid" --manifest "$chain/manifest.json" \
  --tls-server "127.0.0.1:$tls_port" --ws-server "127.0.0.1:$ws_port" --mine-cmd "$mine_cmd" "$@"
say "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
