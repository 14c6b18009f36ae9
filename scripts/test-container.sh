#!/usr/bin/env bash
# The Dockerfile's runtime stage, built and run with podman
# (scripts/test-image.sh: a debootstrapped base and the amd64 package's
# binaries, as base images cannot be pulled here): the image runs as a
# non-root user, `osprey demo` serves in it, and its HEALTHCHECK
# (`osprey ping`) passes once it does.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== test-container [${SECONDS}s]: $*"; }

step "the image (scripts/test-image.sh)"
image=$(scripts/test-image.sh)
# runc, and limits below this machine's: where root lacks CAP_SYS_RESOURCE
# (some VMs and containers) podman's defaults (a million open files and
# processes) cannot be set, and crun refuses hybrid cgroup v1/v2 hosts.
# 4096 files is what the systemd unit gives Osprey.
podman_run_opts=(--runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)

work=target/container-test
rm -rf "$work"
mkdir -p "$work"
user=$(podman image inspect --format '{{.Config.User}}' "$image")
health=$(podman image inspect --format '{{.Config.Healthcheck.Test}}' "$image")
echo "image: user $user, health check $health"
[ "$user" = osprey ] || { echo "the image runs as '$user', not osprey" >&2; exit 1; }
[[ "$health" == *"osprey ping"* ]] || { echo "no HEALTHCHECK running osprey ping" >&2; exit 1; }

step "osprey demo in the container"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
name="osprey-test-$$"
# The host's network: the test asks the demo from outside as a wallet
# would, without depending on the container network's firewall rules.
# The demo stops on Ctrl-C (SIGINT); `osprey serve` also on SIGTERM.
# The health check is run by hand below (`podman healthcheck run`): where
# systemd is not running, podman logs (kept in run.log) that it cannot set
# up its timer.
podman run -d --name "$name" "${podman_run_opts[@]}" --network host --stop-signal SIGINT \
  -e "OSPREY_ELECTRUM_RPC_ADDR=127.0.0.1:$port" --entrypoint osprey "$image" \
  demo --electrum-rpc-addr "127.0.0.1:$port" >/dev/null 2>"$work/run.log" \
  || { cat "$work/run.log"; exit 1; }
cleanup() { podman rm -f -t 0 "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
uid=$(podman exec "$name" id -u)
[ "$uid" != 0 ] || { echo "the container runs as root" >&2; exit 1; }
healthy=""
for _ in $(seq 120); do
  if podman healthcheck run "$name" >/dev/null 2>&1; then
    healthy=yes
    break
  fi
  [ "$(podman inspect --format '{{.State.Running}}' "$name")" = true ] \
    || { podman logs "$name"; echo "the demo exited" >&2; exit 1; }
  sleep 1
done
[ -n "$healthy" ] || { podman logs "$name"; echo "the health check never passed" >&2; exit 1; }
echo "health check: passes while the demo serves (uid $uid in the container)"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"server.version","params":["test-container","1.4"]}' >&3
read -r -t 10 answer <&3
exec 3<&-
echo "server.version from the host: $answer"
[[ "$answer" == *'"result":["Osprey '*'","1.4"]'* ]] || exit 1
podman stop -t 30 "$name" >/dev/null 2>>"$work/run.log"
[ "$(podman inspect --format '{{.State.ExitCode}}' "$name")" = 0 ] \
  || { podman logs "$name"; echo "the demo did not exit 0 on podman stop" >&2; exit 1; }
echo "stopped: exit 0"

step "the health check fails where nothing serves"
podman rm "$name" >/dev/null 2>>"$work/run.log"
podman run -d --name "$name" "${podman_run_opts[@]}" --network host \
  -e "OSPREY_ELECTRUM_RPC_ADDR=127.0.0.1:$port" --entrypoint sleep "$image" 60 \
  >/dev/null 2>>"$work/run.log" || { cat "$work/run.log"; exit 1; }
if podman healthcheck run "$name" >/dev/null 2>&1; then
  echo "the health check passed with no server in the container" >&2
  exit 1
fi
echo "health check: fails (unhealthy) in a container where no Osprey listens"
rm -rf "$work"
step "passed"
