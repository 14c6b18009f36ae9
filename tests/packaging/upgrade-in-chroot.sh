#!/bin/bash
# Runs inside the bookworm chroot of scripts/test-deb-upgrade.sh, as root,
# one step at a time (the host side mines and rebuilds in between):
#
#   upgrade-in-chroot.sh install DEB FORMAT     dpkg -i DEB (the first time,
#                                               or an upgrade), --version's
#                                               format checked; the config
#                                               must be the operator's
#   upgrade-in-chroot.sh configure RPC AUTH PORT  the operator's edits to
#                                               /etc/osprey/osprey.toml
#   upgrade-in-chroot.sh serve HEIGHT PORT      `osprey serve` as user osprey
#                                               until it serves HEIGHT, then
#                                               SIGTERM; its log kept in
#                                               /root/serve-N.log
#
# Upgrades keep the operator's config: dpkg is run non-interactively with
# --force-confold, as apt runs it on a node box (-o
# Dpkg::Options::=--force-confold), so a conffile changed on both sides
# keeps the operator's and the package's goes to osprey.toml.dpkg-dist.
set -euo pipefail
fail() { echo "FAILED: $*" >&2; exit 1; }
config=/etc/osprey/osprey.toml

case "$1" in
install)
  deb=$2 format=$3
  before=""
  [ -e "$config" ] && before=$(sha256sum <"$config")
  DEBIAN_FRONTEND=noninteractive dpkg -i --force-confold "$deb" </dev/null
  [ "$(dpkg-query -W -f '${Status}' osprey)" = "install ok installed" ] || fail "dpkg status"
  echo "installed: osprey $(dpkg-query -W -f '${Version}' osprey); $(/usr/bin/osprey --version)"
  /usr/bin/osprey --version | grep -q "(index format $format)\$" || fail "the package's osprey is not format $format"
  if [ -n "$before" ]; then
    [ "$(sha256sum <"$config")" = "$before" ] || fail "the upgrade changed $config"
    grep -q '^# test-deb-upgrade: the operator' "$config" || fail "the operator's edits are gone"
    echo "config: $config is the operator's, unchanged (sha256 ${before:0:16})$([ -e "$config.dpkg-dist" ] && echo "; the package's new default is $config.dpkg-dist")"
  fi
  ;;
configure)
  rpc=$2 auth=$3 port=$4
  cat >"$config" <<EOF
# test-deb-upgrade: the operator's settings, which upgrades keep
network = "regtest"
daemon_rpc_addr = "$rpc"
auth = "$auth"
db_dir = "/var/lib/osprey/db"
electrum_rpc_addr = "127.0.0.1:$port"
EOF
  echo "configured: $config (regtest node at $rpc, Electrum on 127.0.0.1:$port)"
  ;;
serve)
  height=$2 port=$3
  n=$(find /root -maxdepth 1 -name 'serve-*.log' | wc -l)
  log=/root/serve-$((n + 1)).log
  # As the unit runs it: user osprey, in its home. setpriv execs (runuser
  # would stay the parent and exit 143 on the SIGTERM it forwards).
  (cd /var/lib/osprey && exec setpriv --reuid osprey --regid osprey --init-groups \
    /usr/bin/osprey serve --conf "$config") >"$log" 2>&1 &
  osprey=$!
  tip=""
  for _ in $(seq 600); do
    kill -0 "$osprey" 2>/dev/null || { tail -30 "$log"; fail "osprey exited"; }
    if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
      printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"blockchain.headers.subscribe","params":[]}' >&3
      read -r -t 10 tip <&3 || true
      exec 3<&-
      [[ "$tip" =~ \"height\":${height}[,}] ]] && break
    fi
    sleep 0.5
  done
  [[ "$tip" =~ \"height\":${height}[,}] ]] || { tail -30 "$log"; fail "height $height not served in 300 s (last: ${tip:0:120})"; }
  echo "served: height $height on 127.0.0.1:$port ($(basename "$log"))"
  kill -TERM "$osprey"
  for _ in $(seq 120); do
    kill -0 "$osprey" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$osprey" 2>/dev/null; then
    kill -9 "$osprey"
    fail "osprey did not stop within 60 s of SIGTERM"
  fi
  wait "$osprey" || fail "osprey exited with $? after SIGTERM"
  ;;
*)
  fail "usage: $0 install DEB FORMAT | configure RPC AUTH PORT | serve HEIGHT PORT"
  ;;
esac
