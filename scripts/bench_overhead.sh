#!/usr/bin/env bash
# Proxy-overhead benchmark: the same small chat completion from a static nginx upstream sent direct, through nginx,
# HAProxy, and prefixgate (random, prefix-cache), with wrk; then 256 KiB prompts and 500-event streams. Writes
# overhead.md and overhead.json to docs/benchmarks/ (about 5 minutes; run it on a quiet machine). Needs the Debian
# packages nginx, haproxy and wrk (scripts/setup.sh installs them).
# Usage: scripts/bench_overhead.sh [overhead.py options]   e.g. --tiny --out /tmp/overhead, --profile
#   BENCH_OUT=DIR   write the report there instead of docs/benchmarks (an --out option wins too)
#   BENCH_NO_BUILD=1  skip setup and build: use build/ (or PREFIXGATE_BIN, PREFIXGATE_SIM_BIN) as it is
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  if [[ "$arg" == "-h" || "$arg" == "--help" ]]; then
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    echo
    /usr/bin/python3 loadtest/overhead/overhead.py --help
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
/usr/bin/python3 loadtest/overhead/overhead.py --out "${BENCH_OUT:-docs/benchmarks}" \
  --command "scripts/bench_overhead.sh${*:+ $*}" "$@"
