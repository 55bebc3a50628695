#!/usr/bin/env bash
# Configures and builds prefixgate. Usage: scripts/build.sh [release|asan|tsan] [ninja targets...]
#   release  RelWithDebInfo in build/ (default)
#   asan     AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/
#   tsan     ThreadSanitizer in build-tsan/ (RelWithDebInfo: -O2 -g keeps the instrumented tests fast enough)
# PREFIXGATE_CMAKE_ARGS adds CMake options (split on spaces), e.g. the image build's (docker/Dockerfile), so that
# every build goes through this script.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
shift || true
case "$flavour" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DPREFIXGATE_SANITIZE=ON -DPREFIXGATE_BENCHMARKS=OFF) ;;
  tsan) dir=build-tsan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPREFIXGATE_TSAN=ON -DPREFIXGATE_BENCHMARKS=OFF) ;;
  *) echo "usage: $0 [release|asan|tsan] [targets...]" >&2; exit 2 ;;
esac
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/prefixgate-ccache}
export CCACHE_NOHASHDIR=1
# Relative paths in the hash let a fresh clone in another folder (as CI makes) reuse the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
read -r -a extra <<<"${PREFIXGATE_CMAKE_ARGS:-}"
cmake -S . -B "$dir" -G Ninja "${flags[@]}" "${extra[@]}" >/dev/null
ninja -C "$dir" "$@"
