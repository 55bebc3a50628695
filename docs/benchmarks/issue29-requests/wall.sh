#!/usr/bin/env bash
# BASE=<eb534e0 build> NEW=<d14d7de build> docs/benchmarks/issue29-requests/wall.sh (from the repository root, on a
# quiet machine; about 30 minutes): the overhead harness's request phases for the two builds in turn, base / new /
# new / base (overhead-ab/, one folder per run in its order; `docs/benchmarks/issue29-heads/ab_table.py
# docs/benchmarks/issue29-requests/overhead-ab` prints the table), then the final build once with every phase
# (overhead-final/), then system calls per request and per SSE event (syscalls-final.txt).
set -euo pipefail
out=docs/benchmarks/issue29-requests
run=0
for b in base:${BASE:?} new:${NEW:?} new:$NEW base:$BASE; do
  run=$((run + 1)); l=${b%%:*}; bin=${b#*:}
  BENCH_NO_BUILD=1 PREFIXGATE_BIN=$bin BENCH_OUT=$out/overhead-ab/$run-$l scripts/bench_overhead.sh \
    --phases throughput,families > $out/overhead-ab/$run-$l.log 2>&1
  echo "$(date +%T) run $run ($l) done"
done
BENCH_NO_BUILD=1 PREFIXGATE_BIN=$NEW BENCH_OUT=$out/overhead-final scripts/bench_overhead.sh \
  --phases streaming,throughput,families,long-prompt > $out/overhead-final.log 2>&1
echo "$(date +%T) final done"
PREFIXGATE_BIN=$NEW /usr/bin/python3 loadtest/overhead/syscalls.py --rounds 3 > $out/syscalls-final.txt 2>&1
echo "$(date +%T) syscalls done"
