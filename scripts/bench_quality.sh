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
for arg in "$@"; do
  if [[ "$arg" == "-h" || "$arg" == "--help" ]]; then
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    echo
    /usr/bin/python3 loadtest/bench/quality.py --help
    exit 0
  fi
done
if [[ -z "${BENCH_NO_BUILD:-}" ]]; then
  scripts/setup.sh
  scripts/build.sh release prefixgate prefixgate-engine-sim
fi
# Run a private copy of the binaries, so that a rebuild during the run cannot swap them mid-way.
snapshot=$(mktemp -d -t prefixgate-bench-bin.XXXXXX)
trap 'rm -rf "$snapshot"' EXIT
cp "${PREFIXGATE_BIN:-build/prefixgate}" "$snapshot/prefixgate"
cp "${PREFIXGATE_SIM_BIN:-build/loadtest/prefixgate-engine-sim}" "$snapshot/prefixgate-engine-sim"
export PREFIXGATE_BIN="$snapshot/prefixgate" PREFIXGATE_SIM_BIN="$snapshot/prefixgate-engine-sim"
/usr/bin/python3 loadtest/bench/quality.py --out "${BENCH_OUT:-docs/benchmarks}" \
  --command "scripts/bench_quality.sh${*:+ $*}" "$@"
