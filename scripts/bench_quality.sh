#!/usr/bin/env bash
# Routing-quality benchmark, the full committed report: builds what is missing, then for five workloads
# (shared-prefix, multi-turn, capacity-pressure with a fresh question per request, its repeating-prompt variant,
# Mooncake trace) and seeds 1-5 runs every strategy the gateway offers plus the finite-cache oracle in front of 8
# simulated engine pods, and writes REPORT.md, summary.json and PNG plots to docs/benchmarks/. About 1 h 40 min on
# 2 cores (per seed: capacity pressure 6.5 min, its repeating variant about as long, the other three 6 min
# together; invalid runs are rerun, which adds to it). Run it on a quiet machine: runs whose send lag p99 exceeds
# 10 ms are invalid, and the script exits 1 if a strategy keeps fewer than 5 valid seeds.
# Usage: scripts/bench_quality.sh [quality.py options]   e.g. --workloads capacity-pressure --seeds 1-3 --out /tmp/r
#   --replicas N: N gateways per run sharing their state through Redis, requests round-robin (--no-sync: without it)
#   pd-NAME strategies: NAME's routing on the same --pods split into --prefill-pods P prefill pods and the rest decode
#   pods (issue 26; --kv-transfer-ms-per-1k-tokens, --output-tokens), e.g. --strategies prefix-cache,pd-prefix-cache
#   --out docs/benchmarks/pd (docs/benchmarks.md, "Disaggregated prefill/decode")
#   BENCH_OUT=DIR   write the report there instead of docs/benchmarks (an --out option wins too)
#   BENCH_NO_BUILD=1  skip setup and build: use build/ (or PREFIXGATE_BIN, PREFIXGATE_SIM_BIN) as it is
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench_common.sh
bench_main loadtest/bench/quality.py "$@"
