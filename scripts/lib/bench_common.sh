# Shared by scripts/bench_quality.sh and scripts/bench_overhead.sh (sourced, not run).
# bench_main PYTHON_SCRIPT "$@": --help prints the caller's header and the Python script's options; otherwise
# installs and builds (unless BENCH_NO_BUILD=1), copies the binaries aside so a rebuild during the run cannot swap
# them mid-way, and runs the benchmark with --out "${BENCH_OUT:-docs/benchmarks}" and the command line recorded.
# PREFIXGATE_BUILD_DIR tells the report's provenance which build folder (CMakeCache.txt: the build type) the
# copies came from.

# The nearest folder above a binary that holds a CMakeCache.txt (empty when none).
bench_build_dir() {
  local dir
  dir=$(cd "$(dirname "$1")" && pwd)
  while [[ "$dir" != / && ! -f "$dir/CMakeCache.txt" ]]; do
    dir=$(dirname "$dir")
  done
  if [[ -f "$dir/CMakeCache.txt" ]]; then echo "$dir"; fi
}

bench_main() {
  local script=$1
  shift
  for arg in "$@"; do
    if [[ "$arg" == "-h" || "$arg" == "--help" ]]; then
      sed -n '2,/^[^#]/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
      echo
      /usr/bin/python3 "$script" --help
      exit 0
    fi
  done
  if [[ -z "${BENCH_NO_BUILD:-}" ]]; then
    scripts/setup.sh
    scripts/build.sh release prefixgate prefixgate-engine-sim
  fi
  local gateway=${PREFIXGATE_BIN:-build/prefixgate} sim=${PREFIXGATE_SIM_BIN:-build/loadtest/prefixgate-engine-sim}
  export PREFIXGATE_BUILD_DIR=${PREFIXGATE_BUILD_DIR:-$(bench_build_dir "$gateway")}
  BENCH_SNAPSHOT=$(mktemp -d -t prefixgate-bench-bin.XXXXXX)
  trap 'rm -rf "$BENCH_SNAPSHOT"' EXIT
  cp -p "$gateway" "$BENCH_SNAPSHOT/prefixgate"   # -p: the report gives the build time
  cp -p "$sim" "$BENCH_SNAPSHOT/prefixgate-engine-sim"
  export PREFIXGATE_BIN="$BENCH_SNAPSHOT/prefixgate" PREFIXGATE_SIM_BIN="$BENCH_SNAPSHOT/prefixgate-engine-sim"
  /usr/bin/python3 "$script" --out "${BENCH_OUT:-docs/benchmarks}" --command "scripts/$(basename "$0")${*:+ $*}" "$@"
}
