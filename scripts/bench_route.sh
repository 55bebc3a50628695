#!/usr/bin/env bash
# Microbenchmarks of the real routing decision (bench/route_bench.cpp: Router::choose with the prefix-cache
# strategy, 8 / 64 / 1,000 pods, cold and warm index, character and tiktoken). Builds prefixgate_bench
# (RelWithDebInfo) when needed, runs each benchmark BENCH_REPETITIONS times (5), and writes to BENCH_OUT
# (docs/benchmarks): route-bench.json (Google Benchmark's raw JSON, every repetition), route-bench-provenance.json
# (commit, dirty or not, build type, command lines, load before and after, nproc, CPU model) and route-bench.md
# (median and min-max CPU microseconds per decision). Extra arguments go to prefixgate_bench, e.g.
# --benchmark_filter=character/warm. BENCH_BUILD_DIR (build) picks the build folder; BENCH_NO_BUILD=1 uses it as is.
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  if [[ "$arg" == "-h" || "$arg" == "--help" ]]; then
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
  fi
done

build_dir=${BENCH_BUILD_DIR:-build}
out=${BENCH_OUT:-docs/benchmarks}
repetitions=${BENCH_REPETITIONS:-5}
command_line="scripts/$(basename "$0")${*:+ $*}"
[[ "$build_dir" != build ]] && command_line="BENCH_BUILD_DIR=$build_dir $command_line"

if [[ -z "${BENCH_NO_BUILD:-}" ]]; then
  if [[ "$build_dir" == build ]]; then
    scripts/build.sh release prefixgate_bench
  else
    export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/prefixgate-ccache} CCACHE_NOHASHDIR=1 CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
    [[ -f "$build_dir/CMakeCache.txt" ]] || cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    ninja -C "$build_dir" prefixgate_bench
  fi
fi
# The tiktoken rows need the cl100k_base vocabulary where the gateway looks for it; without it they are reported as
# skipped rather than failing the run.
if [[ ! -s /usr/share/prefixgate/cl100k_base.json && ! -s tools/tiktoken/node_modules/tiktoken/encoders/cl100k_base.json ]]; then
  scripts/fetch_tiktoken.sh >/dev/null || echo "bench_route: no cl100k_base.json; the tiktoken rows will be skipped" >&2
fi

# A copy, so that a rebuild while the benchmarks run cannot swap the binary under them.
snapshot=$(mktemp -d -t prefixgate-route-bench.XXXXXX)
trap 'rm -rf "$snapshot"' EXIT
cp "$build_dir/bench/prefixgate_bench" "$snapshot/prefixgate_bench"
mkdir -p "$out"
bench=("$snapshot/prefixgate_bench" '--benchmark_filter=^(BM_RouterChoose|BM_ParseChatRequest)/'
       "--benchmark_repetitions=$repetitions" --benchmark_report_aggregates_only=false
       "--benchmark_out=$out/route-bench.json" --benchmark_out_format=json "$@")
report=(/usr/bin/python3 tools/route_bench_report.py)
"${report[@]}" provenance-start --out "$out/route-bench-provenance.json" --build-dir "$build_dir" \
  --binary "$snapshot/prefixgate_bench" --command "$command_line" \
  --bench-command "prefixgate_bench ${bench[*]:1}"
"${bench[@]}"
"${report[@]}" provenance-finish --out "$out/route-bench-provenance.json" --json "$out/route-bench.json"
"${report[@]}" render --json "$out/route-bench.json" --provenance "$out/route-bench-provenance.json" \
  --out "$out/route-bench.md"
echo "bench_route: wrote $out/route-bench.json, $out/route-bench-provenance.json, $out/route-bench.md" >&2
