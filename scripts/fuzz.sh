#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in build-fuzz/ and runs each for a while with its seeds
# (tests/fuzz/corpus/<name>, <name> being the target without _fuzz) and its dictionary (tests/fuzz/<name>.dict).
# New inputs go to build-fuzz/corpus/<name> (untracked, kept between runs, so a later run starts where an earlier
# one stopped); crashes to build-fuzz/artifacts/<name>/. Prints per target the executions, exec/s, corpus size
# and any crash with its file, and exits non-zero when a target crashed or failed to build.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    (default: 300 s, every target)
# Reproduce a crash: build-fuzz/tests/fuzz/<target> <crash file>. docs/testing.md has more.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(http_request_fuzz request_body_fuzz prometheus_text_fuzz config_fuzz pods_file_fuzz
  upstream_response_fuzz kv_event_decoder_fuzz watch_line_fuzz resp_fuzz record_batch_fuzz engine_answer_fuzz
  load_entries_fuzz pd_protocol_fuzz flow_service_fuzz)
# A single input slower than this is reported as a hang (a crash).
PER_INPUT_TIMEOUT_S=10

seconds=${1:-300}
if ! [[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]]; then
  echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2
  exit 2
fi
shift || true
targets=("$@")
((${#targets[@]})) || targets=("${ALL_TARGETS[@]}")
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || { echo "fuzz: unknown target '$t' (known: ${ALL_TARGETS[*]})" >&2; exit 2; }
done

# The same ccache settings as scripts/build.sh.
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/prefixgate-ccache}
export CCACHE_NOHASHDIR=1
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
dir=build-fuzz
cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPREFIXGATE_FUZZ=ON \
  -DBUILD_TESTING=OFF -DPREFIXGATE_BENCHMARKS=OFF >/dev/null
ninja -C "$dir" "${targets[@]}"

# The last value of libFuzzer's `name: value` / `stat::name: value` fields in a log ("?" when absent).
field() { grep -oE "$1:? +[0-9]+" "$2" | tail -1 | grep -oE '[0-9]+$' || echo '?'; }

failed=()
rows=()
for t in "${targets[@]}"; do
  name=${t%_fuzz}
  corpus=$dir/corpus/$name artifacts=$dir/artifacts/$name/ log=$dir/logs/$name.log
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  args=(-max_total_time="$seconds" -timeout="$PER_INPUT_TIMEOUT_S" -print_final_stats=1 -artifact_prefix="$artifacts")
  [[ -f tests/fuzz/$name.dict ]] && args+=(-dict="tests/fuzz/$name.dict")
  echo "== $t: ${seconds} s"
  status=0
  # Leaks count as crashes; the first corpus folder receives new inputs, the seeds stay read-only.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$dir/tests/fuzz/$t" "${args[@]}" "$corpus" "tests/fuzz/corpus/$name" >"$log" 2>&1 || status=$?
  execs=$(field 'stat::number_of_executed_units' "$log")
  rate=$(field 'stat::average_exec_per_sec' "$log")
  size=$(grep -oE 'corp: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo '?')
  crash=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/Test unit written to //' || true)
  result=ok
  if ((status != 0)); then
    result="CRASH ${crash:-(no crash file; see $log)}"
    failed+=("$t")
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -5 || true
  fi
  rows+=("$(printf '  %-24s %12s %9s %7s  %s' "$t" "$execs" "$rate" "$size" "$result")")
done

echo
printf '  %-24s %12s %9s %7s  %s\n' target executions exec/s corpus result
printf '%s\n' "${rows[@]}"
if ((${#failed[@]})); then
  echo "fuzz: crashed: ${failed[*]} (logs in $dir/logs/)" >&2
  exit 1
fi
