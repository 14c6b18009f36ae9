#!/bin/bash
# Osprey on RaspiBlitz, as a bonus script of home.admin/config.scripts/
# (the interface RaspiBlitz's menus and status screens call for electrs):
#
#   bonus.osprey.sh status         key='value' lines (dont call in loops)
#   bonus.osprey.sh status-sync    the sync's state, from Osprey's metrics
#   bonus.osprey.sh [on|off|install|uninstall]
#
# It installs Osprey's arm64 (or amd64) Debian package, checked against
# the release's SHA256SUMS, and runs it as the package's systemd service
# (user osprey) with /etc/osprey/osprey.toml written from the node's
# bitcoin.conf, the index in /mnt/hdd/app-storage/osprey, the Electrum
# port on 50001 and nginx's TLS on 50002, as RaspiBlitz serves electrs.
# Osprey answers during its first sync (with the progress), so
# status-sync reads `osprey_initial_sync` from the monitoring port rather
# than whether the port answers.
# tests/data/dropin/app-raspiblitz reproduces the config and the launch.

OSPREY_VERSION="0.1.0"
OSPREY_RELEASES="${OSPREY_RELEASES:-https://example.invalid/osprey/releases/download/v${OSPREY_VERSION}}"
INDEX_DIR="/mnt/hdd/app-storage/osprey"
MONITORING="127.0.0.1:4224"

if [ $# -eq 0 ] || [ "$1" = "-h" ] || [ "$1" = "-help" ]; then
  echo "config script to switch the Osprey Electrum server on or off"
  echo "bonus.osprey.sh status -> dont call in loops"
  echo "bonus.osprey.sh status-sync"
  echo "bonus.osprey.sh [on|off|install|uninstall]"
  echo "installs the version ${OSPREY_VERSION}"
  exit 1
fi

source /mnt/hdd/raspiblitz.conf 2>/dev/null

metric() {
  curl -s -m 3 "http://${MONITORING}/metrics" | sed -n "s/^$1 \([0-9.]*\)$/\1/p" | head -1
}

if [ "$1" = "status" ]; then
  echo "version='${OSPREY_VERSION}'"
  if [ "${osprey}" = "on" ]; then echo "configured=1"; else echo "configured=0"; fi
  if dpkg-query -W -f '${Status}' osprey 2>/dev/null | grep -q "install ok installed"; then
    echo "installed=1"
  else
    echo "installed=0"
  fi
  serviceRunning=$(systemctl is-active --quiet osprey && echo 1 || echo 0)
  echo "serviceRunning=${serviceRunning}"
  echo "portTCP='50001'"
  echo "portSSL='50002'"
  if [ "${runBehindTor}" = "on" ] && [ "$2" = "showAddress" ]; then
    echo "TORaddress='$(sudo cat /mnt/hdd/tor/osprey/hostname 2>/dev/null)'"
  fi
  exit 0
fi

if [ "$1" = "status-sync" ]; then
  if ! systemctl is-active --quiet osprey; then
    echo "serviceRunning=0"
    echo "initialSynced=0"
    echo "infoSync='Not running - check: sudo journalctl -u osprey'"
    exit 0
  fi
  echo "serviceRunning=1"
  initial=$(metric osprey_initial_sync)
  indexHeight=$(metric osprey_index_height)
  nodeHeight=$(metric osprey_node_height)
  echo "indexHeight=${indexHeight:-0}"
  echo "nodeHeight=${nodeHeight:-0}"
  if [ "${initial}" = "0" ]; then
    echo "initialSynced=1"
  else
    echo "initialSynced=0"
    echo "infoSync='Building Index ${indexHeight:-0}/${nodeHeight:-?} (please wait)'"
  fi
  exit 0
fi

sudo systemctl stop osprey 2>/dev/null

if [ "$1" = "install" ]; then
  arch=$(dpkg --print-architecture)
  deb="osprey_${OSPREY_VERSION}_${arch}.deb"
  tmp=$(mktemp -d)
  ( cd "${tmp}" \
    && curl -fsSLO "${OSPREY_RELEASES}/${deb}" \
    && curl -fsSLO "${OSPREY_RELEASES}/SHA256SUMS" \
    && grep " ${deb}\$" SHA256SUMS | sha256sum -c - ) || { echo "# FAIL: downloading or checking ${deb}"; rm -rf "${tmp}"; exit 1; }
  sudo apt-get install -y "${tmp}/${deb}" || { rm -rf "${tmp}"; exit 1; }
  rm -rf "${tmp}"
  exit 0
fi

if [ "$1" = "1" ] || [ "$1" = "on" ]; then
  dpkg-query -W osprey >/dev/null 2>&1 || /home/admin/config.scripts/bonus.osprey.sh install || exit 1

  # The node's RPC credentials, as RaspiBlitz's electrs script reads them.
  RPC_USER=$(sudo grep '^rpcuser=' /mnt/hdd/bitcoin/bitcoin.conf | cut -d= -f2-)
  PASSWORD_B=$(sudo grep '^rpcpassword=' /mnt/hdd/bitcoin/bitcoin.conf | cut -d= -f2-)
  network="bitcoin"
  [ "${chain}" = "test" ] && network="testnet"
  [ "${chain}" = "sig" ] && network="signet"
  sudo install -d -o osprey -g osprey -m 0750 "${INDEX_DIR}"
  sudo tee /etc/osprey/osprey.toml >/dev/null <<CONF
# Written by bonus.osprey.sh; run it again to rewrite.
network = "${network}"
daemon_dir = "/mnt/hdd/bitcoin"
daemon_rpc_addr = "127.0.0.1:8332"
auth = "${RPC_USER}:${PASSWORD_B}"
db_dir = "${INDEX_DIR}/db"
electrum_rpc_addr = "0.0.0.0:50001"
monitoring_addr = "${MONITORING}"
banner = "Osprey ${OSPREY_VERSION} on your RaspiBlitz"
CONF
  sudo chown root:osprey /etc/osprey/osprey.toml
  sudo chmod 640 /etc/osprey/osprey.toml
  # The package's unit writes only /var/lib/osprey (ProtectSystem=strict).
  sudo install -d /etc/systemd/system/osprey.service.d
  printf '[Service]\nReadWritePaths=%s\n' "${INDEX_DIR}" | sudo tee /etc/systemd/system/osprey.service.d/raspiblitz.conf >/dev/null

  # TLS on 50002 by nginx's stream module, as RaspiBlitz serves electrs
  # (a stream block in nginx.conf; one already there is left to the user).
  if ! sudo grep -q 'upstream osprey' /etc/nginx/nginx.conf; then
    if sudo grep -q '^stream {' /etc/nginx/nginx.conf; then
      echo "# nginx.conf has a stream block already: add Osprey's upstream (127.0.0.1:50001, TLS on 50002) by hand"
    else
      sudo tee -a /etc/nginx/nginx.conf >/dev/null <<NGINX
stream {
  upstream osprey {
    server 127.0.0.1:50001;
  }
  server {
    listen 50002 ssl;
    proxy_pass osprey;
    ssl_certificate /mnt/hdd/app-data/nginx/tls.cert;
    ssl_certificate_key /mnt/hdd/app-data/nginx/tls.key;
    ssl_session_cache shared:SSL-osprey:1m;
    ssl_session_timeout 4h;
    ssl_protocols TLSv1.2 TLSv1.3;
  }
}
NGINX
      sudo nginx -t && sudo systemctl reload nginx
    fi
  fi
  sudo ufw allow 50001 comment 'osprey TCP'
  sudo ufw allow 50002 comment 'osprey SSL'
  if [ "${runBehindTor}" = "on" ]; then
    /home/admin/config.scripts/tor.onion-service.sh osprey 50002 50002 50001 50001
  fi
  /home/admin/config.scripts/blitz.conf.sh set osprey "on"
  sudo systemctl daemon-reload
  sudo systemctl enable --now osprey
  echo "# Osprey is on: the first index takes hours; wallets get its progress meanwhile"
  exit 0
fi

if [ "$1" = "0" ] || [ "$1" = "off" ] || [ "$1" = "uninstall" ]; then
  sudo systemctl disable osprey 2>/dev/null
  # nginx's stream block for Osprey stays (it proxies to a closed port).
  sudo rm -f /etc/systemd/system/osprey.service.d/raspiblitz.conf
  sudo ufw delete allow 50001 >/dev/null 2>&1
  sudo ufw delete allow 50002 >/dev/null 2>&1
  /home/admin/config.scripts/tor.onion-service.sh off osprey 2>/dev/null
  /home/admin/config.scripts/blitz.conf.sh set osprey "off"
  # `apt remove` keeps /etc/osprey and the index; delete the index by hand.
  [ "$1" = "uninstall" ] && sudo apt-get remove -y osprey
  exit 0
fi

echo "# FAIL: unknown parameter $1"
exit 1
