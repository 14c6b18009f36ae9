#!/bin/bash
# usage: ab.sh OUTDIR ROUNDS BIN... : restarts lab m's osprey on each binary in turn, runs osprey bench initial-load and many-wallets
out=$1; rounds=$2; shift 2
cd /work/shared/peerlab; export PEERLAB_ROOT=/work/peerlab-data
for r in $(seq 1 $rounds); do
 for b in "$@"; do
  n=$(basename $b)
  PEERLAB_OSPREY=$b python3 peerlab.py --lab m restart --servers osprey --nice 10 > /dev/null 2>&1
  sleep 2
  /tmp/s18/osprey-tools bench --workload initial-load --server 127.0.0.1:29540 --manifest /tmp/med/manifest.json --runs 5 --out $out/$n-r$r-init > /dev/null 2>&1
  /tmp/s18/osprey-tools bench --workload many-wallets --server 127.0.0.1:29540 --manifest /tmp/med/manifest.json --runs 3 --out $out/$n-r$r-many > /dev/null 2>&1
  echo "$n round $r done $(date -u +%T)"
 done
done
