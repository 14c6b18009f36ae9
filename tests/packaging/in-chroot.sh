#!/bin/bash
# Runs inside the clean bookworm chroot of scripts/test-deb.sh, as root:
#   in-chroot.sh install PORT   list the machine, dpkg -i /tmp/osprey.deb,
#                               check what it made, run the installed binaries
#   in-chroot.sh purge          dpkg --purge osprey, compare with the list
set -euo pipefail
fail() { echo "FAILED: $*" >&2; exit 1; }

# Every path with its type, mode and owner, outside what dpkg and the
# tools change on their own: dpkg's database and logs, the shadow
# utilities' backups (/etc/passwd- and the like, the previous copy of each
# file), /run (a tmpfs on a running machine; systemd-analyze leaves a
# file there) and this test's own files in /root and /tmp.
machine() {
  find / -xdev \( -path /proc -o -path /dev -o -path /run -o -path /tmp -o -path /root -o -path /var/lib/dpkg \
    -o -path /var/log -o -path /var/cache/debconf -o -path /etc/passwd- -o -path /etc/group- \
    -o -path /etc/shadow- -o -path /etc/gshadow- \) -prune -o -printf '%y %m %u:%g %p\n' | sort
  cat /etc/passwd /etc/group /etc/shadow /etc/gshadow
}

case "$1" in
install)
  port=$2
  machine >/root/before.txt
  dpkg -i /tmp/osprey.deb
  [ "$(dpkg-query -W -f '${Status}' osprey)" = "install ok installed" ] || fail "dpkg status"

  IFS=: read -r _ _ uid _ _ home shell < <(getent passwd osprey) || fail "no user osprey"
  if [ "$uid" -ge 1000 ] || [ "$home" != /var/lib/osprey ] || [ "$shell" != /usr/sbin/nologin ]; then
    fail "user osprey: uid $uid, home $home, shell $shell"
  fi
  [ "$(stat -c '%U:%G %a' /var/lib/osprey)" = "osprey:osprey 750" ] || fail "/var/lib/osprey"
  [ "$(stat -c '%U:%G %a' /etc/osprey/osprey.toml)" = "root:osprey 640" ] || fail "the config's mode"
  grep -qx '/etc/osprey/osprey.toml' /var/lib/dpkg/info/osprey.conffiles || fail "the config is no conffile"
  for f in /usr/bin/osprey /usr/bin/osprey-tools; do
    [ -x "$f" ] || fail "$f"
  done
  grep -qx 'ExecStart=/usr/bin/osprey serve --conf /etc/osprey/osprey.toml' \
    /lib/systemd/system/osprey.service || fail "the unit's ExecStart"
  echo "installed: user osprey (uid $uid), /var/lib/osprey, $(dpkg -L osprey | grep -c '^/usr/bin/') binaries in /usr/bin, the unit, the config"

  # The installed unit as this Debian's systemd reads it: no warning (an
  # unknown key or a bad value only warns). The check is real: without
  # the binary that ExecStart names, verify fails.
  out=$(systemd-analyze verify /lib/systemd/system/osprey.service 2>&1) || fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify warned: $out"
  mv /usr/bin/osprey /usr/bin/osprey.aside
  if out=$(systemd-analyze verify /lib/systemd/system/osprey.service 2>&1); then
    fail "systemd-analyze verify passed a unit whose ExecStart is missing"
  fi
  mv /usr/bin/osprey.aside /usr/bin/osprey
  [[ "$out" == *"/usr/bin/osprey is not executable"* ]] || fail "unexpected: $out"
  echo "systemd-analyze verify: no warning (and with /usr/bin/osprey moved away: $out)"

  /usr/bin/osprey --version
  /usr/bin/osprey --version | grep -q "^osprey $(dpkg-query -W -f '${Version}' osprey) (index format [0-9]*)$" \
    || fail "--version does not name the package's version"

  # The demo from the installed paths: osprey runs /usr/bin/osprey-tools to
  # generate the chain, indexes it and serves it on the port given.
  /usr/bin/osprey demo --electrum-rpc-addr "127.0.0.1:$port" >/tmp/demo.log 2>&1 &
  demo=$!
  # The port opens while the demo's chain is indexed (wallets then get the
  # progress): ask until the tip is the demo's height, printed once its
  # chain is generated. Emulated (scripts/test-arm64-chroot.sh), this
  # takes minutes.
  answer="" tip="" blocks=""
  for _ in $(seq 1200); do
    kill -0 "$demo" 2>/dev/null || { cat /tmp/demo.log; fail "the demo exited"; }
    blocks=$(sed -n 's/^Osprey demo: \([0-9]*\) blocks.*/\1/p' /tmp/demo.log)
    if [ -n "$blocks" ] && { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
      printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"server.version","params":["in-chroot","1.4"]}' \
        '{"jsonrpc":"2.0","id":2,"method":"blockchain.headers.subscribe","params":[]}' >&3
      read -r -t 10 answer <&3 || true
      read -r -t 10 tip <&3 || true
      exec 3<&-
      [[ "$tip" =~ \"height\":${blocks}[,}] ]] && break
    fi
    sleep 0.5
  done
  echo "server.version: $answer"
  echo "blockchain.headers.subscribe: ${tip:0:60}..."
  [[ "$answer" == *'"result":["Osprey '*'","1.4"]'* ]] || { cat /tmp/demo.log; fail "server.version"; }
  [[ "$tip" =~ \"height\":${blocks}[,}] ]] || { tail -20 /tmp/demo.log; fail "the tip is not the demo's height $blocks within 600 s"; }
  kill -INT "$demo"
  for _ in $(seq 60); do
    kill -0 "$demo" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$demo" 2>/dev/null; then
    kill -9 "$demo"
    fail "the demo did not stop within 30 s of SIGINT"
  fi
  wait "$demo" || fail "the demo exited with $? after SIGINT"
  echo "demo: stopped cleanly on SIGINT"
  ;;
purge)
  dpkg --purge osprey
  ! getent passwd osprey >/dev/null || fail "user osprey is left"
  ! getent group osprey >/dev/null || fail "group osprey is left"
  machine >/root/after.txt
  diff -u /root/before.txt /root/after.txt || fail "the purge left the machine changed (above)"
  echo "purged: the machine's files, users and groups are as before dpkg -i"
  ;;
*)
  fail "usage: $0 install PORT | purge"
  ;;
esac
