#!/usr/bin/env bash
# BASE=<eb534e0 build> NEW=<d14d7de build> docs/benchmarks/issue29-requests/long_ab.sh (from the repository root, on a
# quiet machine; about 7 minutes): the harness's 256 KiB phase for the two builds in turn, base / new / new / base
# (long-ab/, one folder per run in its order), to tell the code from the host after the final run's 256 KiB ratio.
set -euo pipefail
out=docs/benchmarks/issue29-requests/long-ab
mkdir -p $out
run=0
for b in base:${BASE:?} new:${NEW:?} new:$NEW base:$BASE; do
  run=$((run + 1)); l=${b%%:*}; bin=${b#*:}
  BENCH_NO_BUILD=1 PREFIXGATE_BIN=$bin BENCH_OUT=$out/$run-$l scripts/bench_overhead.sh --phases long-prompt \
    > $out/$run-$l.log 2>&1
  echo "$(date +%T) run $run ($l) done"
done
