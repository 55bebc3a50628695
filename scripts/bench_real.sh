#!/usr/bin/env bash
# Routing quality on real engines: builds what is missing (llama.cpp's llama-server included, scripts/setup.sh),
# then calibrates the engine simulator against one llama-server alone, runs the shared-prefix, multi-turn and
# shared-prefix-kv (KV pressure) workloads through a real prefixgate in front of 4 llama-servers (-t 1 --parallel 2)
# for seeds 1-5 and six strategies (random, least-request, prefix-cache, prefix-cache-blend and both with the remote
# tokenizer), then the same requests on simulated pods with the calibrated constants (isolated, and sharing the
# machine's CPU as a probe of the 4 real pods measured: --sim-calibrations lists the others), and writes REPORT.md,
# summary.json, calibration.json, progress.log, records.jsonl.gz and one PNG per workload to
# docs/benchmarks/real-engine/. About 40 minutes on the 2-core machine (per seed about 7 min: 18 runs of 5-16 s on
# each of the three fleets). Run it on a quiet machine: the four pods share the two cores with nothing else.
# Then put its tables into docs/benchmarks.md ("Real engines (llama.cpp)"):
#   loadtest/bench/real_report.py docs/benchmarks/real-engine --docs docs/benchmarks.md
# Usage: scripts/bench_real.sh [real.py options]   e.g. --workloads shared-prefix --seeds 1-2 --out /tmp/r
#   --tiny: two pods, tiny workloads, one seed (about 30 s)
#   BENCH_OUT=DIR     write the report there instead of docs/benchmarks/real-engine (an --out option wins too)
#   BENCH_NO_BUILD=1  skip setup and build: use build/ (or PREFIXGATE_BIN, PREFIXGATE_SIM_BIN) as it is
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench_common.sh
export BENCH_OUT=${BENCH_OUT:-docs/benchmarks/real-engine}
bench_main loadtest/bench/real.py "$@"
