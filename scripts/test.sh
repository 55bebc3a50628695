#!/usr/bin/env bash
# The whole test suite, from a clean clone on a fresh Debian 12 machine: install what is missing, build, run the
# unit and integration tests, then build again with AddressSanitizer + UndefinedBehaviorSanitizer and run the
# same tests there (any sanitizer report fails them), then build the libFuzzer targets with clang and run each
# for a few seconds (a crash or a target that does not build fails the run), and last build with ThreadSanitizer
# and run the tests that exercise threads (label tsan). CI runs exactly this (.ci/run); docs/testing.md has more.
#
# It cannot pass empty: ctest runs with --no-tests=error, and after each ctest stage every listed test must have
# run and passed, each label must reach its minimum in tests/minimum_counts, and a skipped test fails the run
# unless tests/skip_allowlist.txt lists it. Each stage's duration is printed, and a table of them at the end.
#
# Usage: scripts/test.sh [STAGE...]     run these stages (default: all, in this order):
#          setup release-build release-tests asan-build asan-tests fuzz tsan-build tsan-tests
#        scripts/test.sh ctest DIR [LABEL...]   run the tests of build folder DIR (only these labels) with the
#                                               same checks, e.g. scripts/test.sh ctest build unit
#        scripts/test.sh check DIR [LABEL...]   only re-check DIR's last such run (DIR/ctest-results.xml)
set -euo pipefail
cd "$(dirname "$0")/.."

MINIMUM_COUNTS=tests/minimum_counts
SKIP_ALLOWLIST=tests/skip_allowlist.txt
RESULTS_FILE=ctest-results.xml   # ctest's JUnit report, written into the build folder
ALL_STAGES=(setup release-build release-tests asan-build asan-tests fuzz tsan-build tsan-tests)
FUZZ_SECONDS_PER_TARGET=10  # the fuzz stage: a smoke run of every libFuzzer target (scripts/fuzz.sh)
# What the ThreadSanitizer stages build and run: the binaries of the `tsan` label only (tests/CMakeLists.txt).
TSAN_TARGETS=(prefixgate prefixgate-engine-sim unit_index unit_tokenize unit_core)

# Checks a finished ctest run of build folder $1 against its test listing: prints the tests per label and every
# skipped test with its reason, and fails when a listed test did not run, a test failed or was skipped without
# being on the allow list, a label has no minimum, or a label's passed tests are fewer than its minimum.
# With labels after the folder, only tests and minimums of those labels are checked (a filtered run).
check_ctest_run() {
  local dir=$1
  shift
  /usr/bin/python3 scripts/lib/check_ctest_run.py "$dir" "$dir/$RESULTS_FILE" "$MINIMUM_COUNTS" "$SKIP_ALLOWLIST" "$@"
}

# Runs the tests of build folder $1 (only labels $2... when given) and checks the run.
ctest_run() {
  local dir=$1
  shift
  local select=() status=0
  if (($#)); then
    select=(-L "^($(IFS='|'; echo "$*"))\$")
  fi
  rm -f "$dir/$RESULTS_FILE"
  ctest --test-dir "$dir" --output-on-failure -j2 --no-tests=error --output-junit "$PWD/$dir/$RESULTS_FILE" \
    "${select[@]}" || status=$?
  check_ctest_run "$dir" "$@" || status=1
  return "$status"
}

case "${1:-}" in
  ctest) shift; ctest_run "$@"; exit ;;
  check) shift; check_ctest_run "$@"; exit ;;
esac

stages=("$@")
((${#stages[@]})) || stages=("${ALL_STAGES[@]}")
for stage in "${stages[@]}"; do
  [[ " ${ALL_STAGES[*]} " == *" $stage "* ]] || {
    echo "usage: $0 [${ALL_STAGES[*]}]... | ctest DIR [LABEL...] | check DIR [LABEL...]" >&2
    exit 2
  }
done

# Stage timing: each stage prints its duration, and the EXIT trap prints them all (a failed stage included).
now_us() { echo "${EPOCHREALTIME//[^0-9]/}"; }  # microseconds, whatever the locale's decimal point
seconds() { printf '%d.%d' $(($1 / 1000000)) $(($1 % 1000000 / 100000)); }
done_names=() done_us=() done_results=()
current="" current_start=0
suite_start=$(now_us)
begin_stage() {
  current=$1
  current_start=$(now_us)
  echo "== $current"
}
end_stage() {
  local took=$(($(now_us) - current_start))
  done_names+=("$current") done_us+=("$took") done_results+=("${1:-ok}")
  echo "== $current: ${1:-ok} in $(seconds "$took") s"
  current=""
}
summary() {
  local status=$?
  [[ -n "$current" ]] && end_stage FAILED
  echo
  echo "== stage durations"
  printf '  %-16s %10s  %s\n' stage seconds result
  local i
  for i in "${!done_names[@]}"; do
    printf '  %-16s %10s  %s\n' "${done_names[$i]}" "$(seconds "${done_us[$i]}")" "${done_results[$i]}"
  done
  printf '  %-16s %10s  %s\n' total "$(seconds $(($(now_us) - suite_start)))" \
    "$( ((status == 0)) && echo ok || echo "FAILED (exit $status)")"
}
trap summary EXIT

# A full run from a clean clone writes about 8 GB (four build folders, llama.cpp's build, the tools); a disk that
# fills part way fails a compile with "No space left on device" deep in the log, so say it first, with the numbers.
NEEDED_GB=9
free_gb=$(df -P -BG . | awk 'NR == 2 { sub(/G$/, "", $4); print $4 }')
if [[ "$free_gb" =~ ^[0-9]+$ ]] && ((${#stages[@]} == ${#ALL_STAGES[@]} && free_gb < NEEDED_GB)); then
  echo "warning: $PWD has ${free_gb} GB free; a full run from a clean clone needs about ${NEEDED_GB} GB" \
    "(build folders and tools); a build may fail with 'No space left on device'" >&2
fi

for stage in "${ALL_STAGES[@]}"; do
  [[ " ${stages[*]} " == *" $stage "* ]] || continue
  begin_stage "$stage"
  case "$stage" in
    setup) scripts/setup.sh ;;
    release-build) scripts/build.sh release ;;
    release-tests) ctest_run build ;;
    asan-build) scripts/build.sh asan ;;
    asan-tests)
      export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
      export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
      ctest_run build-asan
      ;;
    fuzz) scripts/fuzz.sh "$FUZZ_SECONDS_PER_TARGET" ;;
    tsan-build) scripts/build.sh tsan "${TSAN_TARGETS[@]}" ;;
    tsan-tests) ctest_run build-tsan tsan ;;  # TSAN_OPTIONS (halt_on_error) is set on each test
  esac
  end_stage
done
