#!/usr/bin/env bash
# Runs a command held to a memory cap by a cgroup, the way a 4 GB board
# beside bitcoind would hold Osprey, and says afterwards whether the cap
# was ever hit and what the command used.
#
#   scripts/memcap.sh 1G -- target/release/osprey index ...   # run capped
#   scripts/memcap.sh 1G --exec -- ARGS...                     # exec into it
#
# --exec joins the cgroup and execs the command in place (no report): for a
# wrapper that a harness starts as if it were osprey, e.g.
#   PEERLAB_OSPREY=scripts/osprey-capped peerlab.py ... (see that file).
#
# cgroup v1 (`memory.limit_in_bytes`, swap capped too where the kernel
# accounts it) and v2 (`memory.max`, `memory.swap.max`). Needs root, or a
# delegated cgroup. The cgroup is `osprey-memcap-<name>` (MEMCAP_NAME,
# default the PID), removed when the command ends unless --exec.
set -euo pipefail

limit=${1:?usage: memcap.sh LIMIT [--exec] -- COMMAND...}
shift
exec_in_place=false
if [ "${1:-}" = "--exec" ]; then
  exec_in_place=true
  shift
fi
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "memcap: no command" >&2; exit 2; }

bytes=$(numfmt --from=iec "$limit")
name="osprey-memcap-${MEMCAP_NAME:-$$}"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  version=2
  dir=/sys/fs/cgroup/$name
  mkdir -p "$dir"
  echo "$bytes" >"$dir/memory.max"
  [ -f "$dir/memory.swap.max" ] && echo 0 >"$dir/memory.swap.max"
else
  version=1
  dir=/sys/fs/cgroup/memory/$name
  mkdir -p "$dir"
  # Lowered in this order: memsw (memory + swap) may not go below memory.
  echo "$bytes" >"$dir/memory.limit_in_bytes"
  [ -f "$dir/memory.memsw.limit_in_bytes" ] && echo "$bytes" >"$dir/memory.memsw.limit_in_bytes"
fi

if $exec_in_place; then
  echo $$ >"$dir/cgroup.procs"
  exec "$@"
fi

# The command runs in a child shell that joins the cgroup first, so every
# process it starts is inside from its first byte.
rss_file=$(mktemp)
trap 'rm -f "$rss_file"' EXIT
start=$(date +%s.%N)
set +e
/usr/bin/time -f "%M" -o "$rss_file" bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' memcap "$dir" "$@"
status=$?
set -e
end=$(date +%s.%N)

if [ $version = 1 ]; then
  peak=$(cat "$dir/memory.max_usage_in_bytes")
  hits=$(cat "$dir/memory.failcnt")
  ooms=$(sed -n 's/^oom_kill //p' "$dir/memory.oom_control")
else
  peak=$(cat "$dir/memory.peak" 2>/dev/null || echo 0)
  hits=$(sed -n 's/^max //p' "$dir/memory.events")
  ooms=$(sed -n 's/^oom_kill //p' "$dir/memory.events")
fi
maxrss_kib=$(tail -1 "$rss_file" 2>/dev/null || echo 0)
rmdir "$dir" 2>/dev/null || true
# One line for a person, one JSON line for a script.
wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
echo "memcap: cap $limit (cgroup v$version), exit $status, wall ${wall}s, peak rss $((maxrss_kib / 1024)) MiB, cgroup peak $((peak >> 20)) MiB (page cache included), times the cap was hit $hits, oom kills ${ooms:-0}" >&2
printf '{"cap_bytes":%s,"cgroup":%s,"exit":%s,"wall_s":%s,"peak_rss_bytes":%s,"cgroup_peak_bytes":%s,"cap_hits":%s,"oom_kills":%s}\n' \
  "$bytes" "$version" "$status" "$wall" "$((maxrss_kib * 1024))" "$peak" "${hits:-0}" "${ooms:-0}" >&2
exit $status
