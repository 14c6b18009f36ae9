#!/usr/bin/env bash
# A/B rounds between Osprey binaries on one peerlab lab (../shared/peerlab):
# ROUNDS times, for each binary in turn, restarts the lab's Osprey on it and
# runs `osprey bench`'s initial load (5 warm runs after a cold one), then
# many wallets (3), against it alone. Each run's report lands in
# OUT/<binary>-r<round>-init and -many; scripts/ab_summary.py OUT gives the
# medians over the rounds.
#
# usage: MANIFEST=CHAIN/manifest.json scripts/ab.sh OUT ROUNDS BIN...
#
# The lab must be up, with an Osprey, on the chain of MANIFEST. Environment:
#   MANIFEST      the chain's manifest.json (required)
#   PEERLAB       peerlab's directory [../shared/peerlab]
#   LAB           the lab's name [m]
#   SERVER        the lab's Osprey [127.0.0.1:29540, at the default port base]
#   OSPREY_TOOLS  the bench client [target/release/osprey-tools]
# PEERLAB_ROOT, if set, reaches peerlab.py as it is.
set -euo pipefail
usage="usage: MANIFEST=CHAIN/manifest.json scripts/ab.sh OUT ROUNDS BIN..."
out=${1:?$usage}
rounds=${2:?$usage}
shift 2
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
manifest=${MANIFEST:?$usage}
peerlab=${PEERLAB:-../shared/peerlab}
lab=${LAB:-m}
server=${SERVER:-127.0.0.1:29540}
tools=${OSPREY_TOOLS:-target/release/osprey-tools}

for round in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    name=$(basename "$bin")
    PEERLAB_OSPREY=$(realpath "$bin") python3 "$peerlab/peerlab.py" --lab "$lab" \
      restart --servers osprey --nice 10 >/dev/null
    # As in the rounds of 2026-11-24: a short rest between the restart and
    # the cold run.
    sleep 2
    "$tools" bench --workload initial-load --server "$server" --manifest "$manifest" \
      --runs 5 --out "$out/$name-r$round-init" >/dev/null
    "$tools" bench --workload many-wallets --server "$server" --manifest "$manifest" \
      --runs 3 --out "$out/$name-r$round-many" >/dev/null
    echo "$name round $round done $(date -u +%T)"
  done
done
