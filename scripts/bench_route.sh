#!/usr/bin/env bash
# Microbenchmarks of the real routing decision (bench/route_bench.cpp: Router::choose with the prefix-cache
# strategy, 8 / 64 / 1,000 pods, cold and warm index, character and tiktoken). Builds prefixgate_bench
# (RelWithDebInfo) when needed, runs each benchmark BENCH_REPETITIONS times (5), and writes to BENCH_OUT
# (docs/benchmarks): route-bench.json (Google Benchmark's raw JSON, every repetition), route-bench-provenance.json
# (commit, dirty or not, build type, command lines, load before and after, nproc, CPU model) and route-bench.md
# (median and min-max CPU microseconds per decision). Extra arguments go to prefixgate_bench, e.g.
# --benchmark_filter=character/warm. BENCH_BUILD_DIR (build) picks the build folder; BENCH_NO_BUILD=1 uses it as is.
# Before/after: BENCH_BASELINE=<another build's prefixgate_bench> runs it and this build's in turn, one repetition
# each per round (BENCH_REPETITIONS rounds, 3), on the character tokenizer's steps and decisions (8 and 1,000 pods),
# and adds route-bench-baseline.json and a before/after table of medians to route-bench.md.
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do
  if [[ "$arg" == "-h" || "$arg" == "--help" ]]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
  fi
done

build_dir=${BENCH_BUILD_DIR:-build}
out=${BENCH_OUT:-docs/benchmarks}
baseline=${BENCH_BASELINE:-}
repetitions=${BENCH_REPETITIONS:-$([[ -n "$baseline" ]] && echo 3 || echo 5)}
command_line="scripts/$(basename "$0")${*:+ $*}"
[[ "$build_dir" != build ]] && command_line="BENCH_BUILD_DIR=$build_dir $command_line"
[[ -n "$baseline" ]] && command_line="BENCH_BASELINE=$baseline BENCH_REPETITIONS=$repetitions $command_line"

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
filter='^(BM_RouterChoose|BM_ParseChatRequest|BM_JsonDepthScan|BM_RouteStep)/'
[[ -n "$baseline" ]] &&
  filter='^(BM_RouterChoose/character/[a-z]+/[0-9]+KiB/(8|1000)pods$|(BM_ParseChatRequest|BM_JsonDepthScan|BM_RouteStep)/)'
report=(/usr/bin/python3 tools/route_bench_report.py)
if [[ -z "$baseline" ]]; then
  bench=("$snapshot/prefixgate_bench" "--benchmark_filter=$filter"
         "--benchmark_repetitions=$repetitions" --benchmark_report_aggregates_only=false
         "--benchmark_out=$out/route-bench.json" --benchmark_out_format=json "$@")
  "${report[@]}" provenance-start --out "$out/route-bench-provenance.json" --build-dir "$build_dir" \
    --binary "$snapshot/prefixgate_bench" --command "$command_line" \
    --bench-command "prefixgate_bench ${bench[*]:1}"
  "${bench[@]}"
else
  cp "$baseline" "$snapshot/baseline_bench"
  bench=("--benchmark_filter=$filter" --benchmark_repetitions=1 --benchmark_out_format=json "$@")
  "${report[@]}" provenance-start --out "$out/route-bench-provenance.json" --build-dir "$build_dir" \
    --binary "$snapshot/prefixgate_bench" --command "$command_line" \
    --bench-command "prefixgate_bench ${bench[*]} (and the baseline's, in turn, $repetitions rounds)"
  # Alternating, so that a change in the machine's load during the run falls on both builds alike.
  for ((round = 0; round < repetitions; ++round)); do
    "$snapshot/baseline_bench" "${bench[@]}" "--benchmark_out=$snapshot/before-$round.json" >/dev/null
    "$snapshot/prefixgate_bench" "${bench[@]}" "--benchmark_out=$snapshot/after-$round.json" >/dev/null
    echo "bench_route: round $((round + 1)) of $repetitions done" >&2
  done
  baseline_src=$(dirname "$(readlink -f "$baseline")")
  /usr/bin/python3 - "$snapshot" "$repetitions" "$out" "$(git -C "$baseline_src" rev-parse HEAD)" \
    "$(git -C "$baseline_src" status --porcelain | awk '{print $2}' | tr '\n' ' ')" <<'PY'
import json, sys
from pathlib import Path
snapshot, rounds, out, commit, dirty = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5]
for side, name in (("after", "route-bench.json"), ("before", "route-bench-baseline.json")):
    runs = [json.loads((snapshot / f"{side}-{r}.json").read_text()) for r in range(rounds)]
    merged = {"context": runs[0]["context"], "benchmarks": [b for run in runs for b in run["benchmarks"]]}
    if side == "before":
        merged["baseline"] = {"commit": commit, "changed_files": dirty.split()}
    (out / name).write_text(json.dumps(merged, indent=1) + "\n")
PY
fi
"${report[@]}" provenance-finish --out "$out/route-bench-provenance.json" --json "$out/route-bench.json"
"${report[@]}" render --json "$out/route-bench.json" --provenance "$out/route-bench-provenance.json" \
  --out "$out/route-bench.md"
if [[ -n "$baseline" ]]; then
  # The before/after table: medians over the rounds, CPU time (real time for the manually timed steps).
  /usr/bin/python3 - "$out" "$repetitions" <<'PY' >>"$out/route-bench.md"
import json, statistics, sys
from pathlib import Path
out, rounds = Path(sys.argv[1]), sys.argv[2]
def medians(path):
    data = json.loads(path.read_text())
    times = {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = b["name"].split("/iterations:")[0]
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b.get("time_unit", "ns")]
        times.setdefault(name, []).append((b["real_time"] if "manual_time" in b["name"] else b["cpu_time"]) * scale)
    return {k: statistics.median(v) for k, v in times.items()}, data.get("baseline", {})
before, base = medians(out / "route-bench-baseline.json")
after, _ = medians(out / "route-bench.json")
print(f"\n## Before/after: medians of {rounds} alternating rounds, microseconds\n")
print(f"Before = commit `{base.get('commit', '?')}` built with this run's benchmark sources "
      f"(changed there: {', '.join(base.get('changed_files', [])) or 'nothing'}); after = this commit. "
      "CPU time, except `BM_RouteStep` (one step timed alone on the steady clock, manual time). "
      "Raw: [route-bench-baseline.json](route-bench-baseline.json), [route-bench.json](route-bench.json).\n")
print("| benchmark | before | after | after / before |")
print("| --- | --- | --- | --- |")
for name in sorted(after, key=lambda n: (n.split("/")[0], n.split("/")[1:-1], int(n.split("/")[-1].split("KiB")[0]) if "KiB" in n.split("/")[-1] else 0, n)):
    if name in before:
        ratio = after[name] / before[name] if before[name] > 0 else float("nan")
        print(f"| {name} | {before[name]:,.2f} | {after[name]:,.2f} | {ratio:.2f} |")
PY
fi
echo "bench_route: wrote $out/route-bench.json, $out/route-bench-provenance.json, $out/route-bench.md" >&2
