#!/usr/bin/env bash
# Proxy-overhead benchmark: chat completions from a static nginx upstream (8 ports: the 8 pods) sent direct, through
# nginx, HAProxy and prefixgate (random, prefix-cache), each proxy with one worker / thread / event loop, with wrk:
# a fixed 2 KiB body, rotating 2 KiB and 256 KiB conversation families (prefix-cache matching for real), a fixed
# rate, and 500-event streams; 5 interleaved rounds, medians with min-max. Writes overhead.md and overhead.json to
# docs/benchmarks/ (about 9 minutes; run it on a quiet machine). Needs the Debian packages nginx, haproxy and wrk
# (scripts/setup.sh installs them).
# Usage: scripts/bench_overhead.sh [overhead.py options]   e.g. --tiny --out /tmp/overhead, --profile,
#   --proxy-loops 2 (every proxy with 2 workers / threads / event loops: the scaling check)
#   BENCH_OUT=DIR   write the report there instead of docs/benchmarks (an --out option wins too)
#   BENCH_NO_BUILD=1  skip setup and build: use build/ (or PREFIXGATE_BIN, PREFIXGATE_SIM_BIN) as it is
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/bench_common.sh
bench_main loadtest/overhead/overhead.py "$@"
