#!/usr/bin/env bash
# Flow-control benchmark (issue 27): the quality runner's four flow workloads (noisy-neighbour and its
# noisy-neighbour-alone variant, priority-overload, mixed-objectives), each with flow control off (today's gateway,
# no flow_control section) and on (`least-request:flow.enabled=true`: the workload's classes and
# max_in_flight_per_pod = the pods' --max-num-seqs; and the same with flow_control.max_tenant_share 0.75), seeds 1-3,
# 4 simulated pods; writes REPORT.md and summary.json
# to docs/benchmarks/flow/ and the tables between <!-- flow-control:begin --> and <!-- flow-control:end --> in
# docs/benchmarks.md. About 22 min on 2 cores (one seed of two strategies took 4 min 53 s: 8 runs of 30-45 simulated s at time
# scale 1, with the drain of flow off's backlog; invalid runs are rerun, which adds to it). Run it on a quiet
# machine: runs whose send lag p99 exceeds 10 ms are invalid, and the script exits 1 if a run loses a request
# (neither answered nor shed with a status) or a strategy keeps fewer than 3 valid seeds.
# Usage: scripts/bench_flow.sh [quality.py options]   (options after the defaults win, e.g. --seeds 1 --out /tmp/f)
#   BENCH_OUT=DIR     write the report there instead of docs/benchmarks/flow (an --out option wins too)
#   BENCH_NO_BUILD=1  skip setup and build: use build/ (or PREFIXGATE_BIN, PREFIXGATE_SIM_BIN) as it is
#   BENCH_DOCS=FILE   the Markdown file whose flow-control block is rewritten (default docs/benchmarks.md; empty: none)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench_common.sh
export BENCH_OUT=${BENCH_OUT:-docs/benchmarks/flow}
docs=${BENCH_DOCS-docs/benchmarks.md}
workloads=noisy-neighbour,noisy-neighbour-alone,priority-overload,mixed-objectives
bench_main loadtest/bench/quality.py --workloads "$workloads" \
  --strategies least-request,least-request:flow.enabled=true,least-request:flow.enabled=true+flow.max_tenant_share=0.75 --pods 4 --seeds 1-3 ${docs:+--docs "$docs"} "$@"
