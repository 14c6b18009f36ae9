#!/usr/bin/env bash
# Osprey's Umbrel app (contrib/umbrel/) run as umbrelOS runs it, against a
# regtest Bitcoin Core, until a wallet is served:
#
#   scripts/test-umbrel.sh
#
# - The network: umbrelOS's umbrel_main_network (10.21.0.0/16), a podman
#   bridge here, with Bitcoin Core where umbrelOS's bitcoin app puts it
#   (APP_BITCOIN_NODE_IP 10.21.21.8, RPC on 8332 with Umbrel's rpcauth
#   user `umbrel`, uid 1000, its data in APP_BITCOIN_DATA_DIR): the host's
#   ../shared/peers/bin/bitcoind in a bookworm container
#   (scripts/bookworm-rootfs.sh with its libraries).
# - The variables: those umbrelOS and the bitcoin app's exports.sh give
#   every app (APP_BITCOIN_*, APP_DATA_DIR, APP_VERSION, ...), then
#   contrib/umbrel/exports.sh sourced as umbrelOS sources it.
# - The app: the compose's `osprey` service, translated to `podman run`
#   by scripts/compose_service.py (every key it has; an unknown one
#   fails), on the image of scripts/test-image.sh tagged as the compose
#   names it. Its port is published on 127.0.0.1 at a free port instead
#   of 0.0.0.0:50001. The compose's other services are Umbrel's
#   (app_proxy, the connection page, tor): their images come from Docker
#   Hub, which this machine cannot reach; they are not run.
#
# Then a wallet: Core's wallet pays an address and mines the payment, and
# the app's Electrum port must give the address's balance and unspent
# output, the chain's tip and the compose's banner; `podman stop` must end
# Osprey cleanly within the compose's stop_grace_period. Needs root
# (podman, debootstrap). Every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== test-umbrel [${SECONDS}s]: $*"; }
fail() { echo "test-umbrel: FAILED: $*" >&2; exit 1; }
app=contrib/umbrel
bin_dir=$(cd ../shared/peers/bin && pwd)
# As scripts/test-container.sh: runc, and limits this machine allows.
podman_run_opts=(--runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The manifest and the compose are YAML (PyYAML, from PyPI if missing).
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install --quiet pyyaml

step "the manifest and exports.sh"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
python3 - "$app/umbrel-app.yml" "$version" <<'EOF'
import sys
import yaml
manifest = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
expected = {"manifestVersion": 1.1, "id": "osprey", "category": "bitcoin", "version": sys.argv[2]}
for key, value in expected.items():
    assert manifest.get(key) == value, f"{key}: {manifest.get(key)!r}, not {value!r}"
assert manifest.get("implements") == ["electrs"], "implements: electrs"
assert "bitcoin" in manifest.get("dependencies", []), "depends on bitcoin"
for key in ("name", "tagline", "description", "developer", "port", "gallery", "path",
            "defaultPassword", "releaseNotes", "submitter", "submission", "website", "repo", "support"):
    assert key in manifest, f"no {key}"
print(f"umbrel-app.yml: {manifest['id']} {manifest['version']}, implements {manifest['implements']}, port {manifest['port']}")
EOF

work=$(mktemp -d /tmp/osprey-umbrel-XXXXXX)
network="umbrel_main_network_test_$$"
core="umbrel-bitcoin-$$"
osprey="umbrel-osprey-$$"
cleanup() {
  podman rm -f -t 0 "$osprey" "$core" >/dev/null 2>&1 || true
  podman network rm -f "$network" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# What umbrelOS sets for every app, and the bitcoin app's exports
# (umbrel-apps bitcoin/exports.sh) on a regtest node.
export APP_ID=osprey
export DEVICE_DOMAIN_NAME=umbrel.local
export APP_VERSION=$version
export APP_DATA_DIR="$work/app-data/osprey"
export TOR_DATA_DIR="$work/tor/data"
export EXPORTS_APP_ID=osprey
export EXPORTS_TOR_DATA_DIR=$TOR_DATA_DIR
export APP_BITCOIN_NODE_IP=10.21.21.8
export APP_BITCOIN_RPC_PORT=8332
export APP_BITCOIN_P2P_PORT=8333
export APP_BITCOIN_NETWORK=regtest
export APP_BITCOIN_NETWORK_ELECTRS=regtest
export APP_BITCOIN_RPC_USER=umbrel
APP_BITCOIN_RPC_PASS=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
export APP_BITCOIN_RPC_PASS
export APP_BITCOIN_DATA_DIR="$work/app-data/bitcoin/data/bitcoin"
# shellcheck source=contrib/umbrel/exports.sh
. "$app/exports.sh"
for suffix in IP NODE_IP NODE_PORT; do
  electrs_var="APP_ELECTRS_$suffix"
  osprey_var="APP_OSPREY_$suffix"
  [ "${!electrs_var:-}" = "${!osprey_var}" ] || fail "exports.sh: $electrs_var is '${!electrs_var:-}', not $osprey_var's ${!osprey_var}"
done
echo "exports.sh: Osprey at $APP_OSPREY_NODE_IP:$APP_OSPREY_NODE_PORT, also as APP_ELECTRS_NODE_IP/PORT; hidden service $APP_OSPREY_RPC_HIDDEN_SERVICE"
# umbrelOS makes app data directories owned by 1000:1000.
mkdir -p "$APP_BITCOIN_DATA_DIR" "$APP_DATA_DIR/data/osprey" "$TOR_DATA_DIR"
chown -R 1000:1000 "$work/app-data"

step "images: Osprey's (scripts/test-image.sh), Core's base (bookworm with its libraries)"
image=$(scripts/test-image.sh)
app_image=$(python3 scripts/compose_service.py "$app/docker-compose.yml" osprey image)
podman tag "$image" "$app_image"
core_tarball=$(scripts/bookworm-rootfs.sh --include libzmq5,libsqlite3-0)
core_image="localhost/osprey-test-base:$(basename "$core_tarball" .tar.gz)"
podman image exists "$core_image" || podman import --quiet "$core_tarball" "$core_image" >/dev/null
echo "Osprey: $app_image; Core: $core_image"

step "umbrel_main_network and Bitcoin Core at $APP_BITCOIN_NODE_IP"
podman network create --subnet 10.21.0.0/16 "$network" >/dev/null
# Umbrel's rpcauth line for its user, as bitcoin/exports.sh makes it
# (Core's share/rpcauth: HMAC-SHA256 of the password keyed by a salt).
rpcauth=$(python3 -c '
import hashlib, hmac, secrets, sys
salt = secrets.token_hex(16)
print(f"{sys.argv[1]}:{salt}${hmac.new(salt.encode(), sys.argv[2].encode(), hashlib.sha256).hexdigest()}")
' "$APP_BITCOIN_RPC_USER" "$APP_BITCOIN_RPC_PASS")
# Umbrel's APP_BITCOIN_COMMAND (ports and binds), on regtest; a fallback
# fee so that the regtest wallet can pay.
podman run -d --name "$core" "${podman_run_opts[@]}" --user 1000:1000 \
  --network "$network" --ip "$APP_BITCOIN_NODE_IP" \
  -v "$APP_BITCOIN_DATA_DIR:/data/.bitcoin" \
  -v "$bin_dir/bitcoind:/usr/local/bin/bitcoind:ro" -v "$bin_dir/bitcoin-cli:/usr/local/bin/bitcoin-cli:ro" \
  "$core_image" bitcoind -regtest -datadir=/data/.bitcoin -printtoconsole \
  -port=8333 -rpcport=8332 -rpcbind="$APP_BITCOIN_NODE_IP" -rpcbind=127.0.0.1 \
  -rpcallowip=10.21.0.0/16 -rpcallowip=127.0.0.1 "-rpcauth=$rpcauth" -fallbackfee=0.0002 \
  >/dev/null 2>"$work/core-run.log" || { cat "$work/core-run.log"; fail "starting Core"; }
cli() {
  podman exec "$core" bitcoin-cli -regtest -rpcconnect=127.0.0.1 -rpcport=8332 \
    "-rpcuser=$APP_BITCOIN_RPC_USER" "-rpcpassword=$APP_BITCOIN_RPC_PASS" "$@"
}
for _ in $(seq 120); do
  cli getblockchaininfo >/dev/null 2>&1 && break
  [ "$(podman inspect --format '{{.State.Running}}' "$core")" = true ] || { podman logs "$core" | tail -20; fail "Core exited"; }
  sleep 0.5
done
cli getblockchaininfo >/dev/null || fail "Core's RPC did not answer within 60 s"

step "a wallet paid on the chain"
cli -named createwallet wallet_name=umbrel-test >/dev/null
miner=$(cli getnewaddress)
cli generatetoaddress 101 "$miner" >/dev/null
address=$(cli getnewaddress "" bech32)
txid=$(cli sendtoaddress "$address" 1.25)
cli generatetoaddress 1 "$miner" >/dev/null
script=$(cli getaddressinfo "$address" | python3 -c 'import json, sys; print(json.load(sys.stdin)["scriptPubKey"])')
height=$(cli getblockcount)
echo "paid 1.25 BTC to $address in $txid, mined at height $height"

step "the app's osprey service (compose -> podman run)"
port=$(free_port)
mapfile -t run_args < <(python3 scripts/compose_service.py "$app/docker-compose.yml" osprey run \
  --name "$osprey" --network "$network" --host-port "$APP_OSPREY_NODE_PORT=$port")
[ ${#run_args[@]} -gt 0 ] || fail "compose_service.py gave no arguments"
printf 'podman run'; printf ' %q' "${run_args[@]}" | sed "s/$APP_BITCOIN_RPC_PASS/<password>/g"; echo
podman run "${podman_run_opts[@]}" "${run_args[@]}" >/dev/null 2>"$work/osprey-run.log" \
  || { cat "$work/osprey-run.log"; fail "starting the app"; }

step "a wallet asks Osprey on 127.0.0.1:$port"
python3 - "$port" "$script" "$txid" "$height" "Osprey on Umbrel ($version)" <<'EOF' || { podman logs "$osprey" 2>&1 | tail -40; fail "the wallet was not served"; }
import hashlib
import json
import socket
import sys
import time

port, script, txid, height, banner = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
scripthash = hashlib.sha256(bytes.fromhex(script)).digest()[::-1].hex()
deadline = time.monotonic() + 300


def session():
    conn = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
    reader = conn.makefile("rb")
    ids = iter(range(1, 1 << 30))

    def call(method, *params):
        request = {"jsonrpc": "2.0", "id": next(ids), "method": method, "params": list(params)}
        conn.sendall(json.dumps(request).encode() + b"\n")
        line = reader.readline(1 << 20)
        if not line:
            raise ConnectionError("closed")
        return json.loads(line)
    return conn, call


last = None
while True:
    try:
        conn, call = session()
        try:
            version = call("server.version", "test-umbrel", "1.4")["result"]
            tip = call("blockchain.headers.subscribe").get("result")
            if tip and tip["height"] == height:
                balance = call("blockchain.scripthash.get_balance", scripthash)
                if "result" in balance:
                    unspent = call("blockchain.scripthash.listunspent", scripthash)["result"]
                    served_banner = call("server.banner")["result"]
                    break
                last = balance
            else:
                last = tip
        finally:
            conn.close()
    except (OSError, ConnectionError, ValueError) as e:
        last = repr(e)
    if time.monotonic() > deadline:
        sys.exit(f"not served within 300 s; last answer: {last}")
    time.sleep(0.5)

print(f"server.version: {version}")
print(f"blockchain.headers.subscribe: height {tip['height']}")
print(f"get_balance: {balance['result']}")
print(f"listunspent: {unspent}")
print(f"server.banner: {served_banner!r}")
assert balance["result"] == {"confirmed": 125000000, "unconfirmed": 0}, balance
assert [(u["tx_hash"], u["value"], u["height"]) for u in unspent] == [(txid, 125000000, height)], unspent
assert banner in served_banner, f"the banner is not the compose's {banner!r}"
EOF
podman logs "$osprey" 2>&1 | grep -m3 -E 'block files|block source|serving Electrum' || true

step "podman stop: Osprey closes the index within stop_grace_period"
podman stop "$osprey" >/dev/null
code=$(podman inspect --format '{{.State.ExitCode}}' "$osprey")
[ "$code" = 0 ] || { podman logs "$osprey" 2>&1 | tail -20; fail "Osprey exited $code on SIGTERM"; }
[ -d "$APP_DATA_DIR/data/osprey/db/regtest" ] || fail "no index in \$APP_DATA_DIR/data/osprey/db/regtest"
echo "stopped: exit 0; the index is in \$APP_DATA_DIR/data/osprey/db/regtest, owned by $(stat -c %u:%g "$APP_DATA_DIR/data/osprey/db/regtest")"
step "passed"
