#!/usr/bin/env bash
# The whole test suite, from a clean clone on a fresh Debian 12 machine: install what is missing, build, run the
# unit and integration tests, then build again with AddressSanitizer + UndefinedBehaviorSanitizer and run the
# same tests there (any sanitizer report fails them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== release build"
scripts/build.sh release
echo "== release tests"
ctest --test-dir build --output-on-failure -j2

echo "== sanitizer build (ASan + UBSan)"
scripts/build.sh asan
echo "== sanitizer tests"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ctest --test-dir build-asan --output-on-failure -j2
