#!/usr/bin/env bash
# Routing-quality benchmark, the full committed report: builds what is missing, then for four workloads
# (shared-prefix, multi-turn, capacity-pressure, Mooncake trace) runs every strategy the gateway offers in front
# of 8 simulated engine pods and writes REPORT.md, summary.json and PNG plots to docs/benchmarks/ (about 11
# minutes on 2 cores; run it on a quiet machine).
# Usage: scripts/bench_quality.sh [quality.py options]   e.g. --workloads capacity-pressure --out /tmp/report
#   BENCH_OUT=DIR   write the report there instead of docs/benchmarks (an --out option wins too)
#   BENCH_NO_BUILD=1  skip setup and build: use build/ (or PREFIXGATE_BIN, PREFIXGATE_SIM_BIN) as it is
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench_common.sh
bench_main loadtest/bench/quality.py "$@"
