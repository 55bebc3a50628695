#!/usr/bin/env bash
# Builds llama.cpp's llama-server (CPU only) into tools/llama/bin/llama-server and prints its absolute path: a real
# inference engine for the tests and benchmarks (tools/llama/README.md). llama.cpp is not a Debian package and there
# is no internet here but Debian's archive and npm, so the source comes from the npm package node-llama-cpp (pinned
# below), whose llama/gitRelease.bundle is a git bundle of llama.cpp's source at the tag in llama/llama.cpp.info.json.
# The package is checked against the pinned sha256 before anything in it is used. The source is cloned into
# tools/llama/src/ (tools/llama/make_model.py reads its gguf-py and vocabularies), built in tools/llama/build/.
# Safe to run again: it does nothing when the binary is installed and its stamp names the pinned package and the same
# build options. Needs npm, git, cmake, ninja and a C++17 compiler (scripts/setup.sh), and the npm registry the
# first time. A cold build took 9 minutes on the 2-core development machine while other builds ran (10 CPU minutes,
# about 5 on an idle machine); with ccache warm (another clone, or a wiped build folder) the whole script takes 10 s.
# Messages go to stderr; stdout is the path.
set -euo pipefail

PACKAGE=node-llama-cpp@3.21.1
PACKAGE_SHA256=7a231d6bafa14142a1cbed9893d4ec5bc6041b2a5f5939a623accaab4203c11f
# The bundle's HEAD: llama.cpp's source at the tag node-llama-cpp names v0.4.0 (CMake's LLAMA_VERSION 0.4.0).
LLAMA_COMMIT=80fb11ac73e66d89eae2c6a91d8a77428fa733ed

# Only what llama-server needs, offline: no web UI (neither built with npm nor downloaded), no HTTPS, no tests or
# examples; static libraries, so the binary needs nothing but libc and libstdc++ (no OpenMP either: the tests run it
# with one thread). GGML_NATIVE=OFF builds the x86-64-v3 kernels (AVX2, FMA, F16C: ggml's defaults without NATIVE)
# rather than -march=native, so a binary restored from a cache runs on any machine that runs the gateway's default
# image (PREFIXGATE_JSON_ARCH=x86-64-v3). Measured on the AVX-512 development machine with make_model.py's default
# model on one thread (CPU time of a 1,571-token prompt, other builds running): prefill 0.28-0.33 s either way,
# decode 2.5-2.9 ms/token here against 1.7-1.9 native. Prefill, the work prefix caching saves and the benchmarks
# measure, is the same, and decode stays a few ms/token, so portability wins.
CMAKE_OPTIONS=(
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF
  -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="$root/tools/llama"
src="$base/src"
build="$base/build"
server="$base/bin/llama-server"
stamp="$base/bin/.stamp"
want_stamp="$PACKAGE $PACKAGE_SHA256 ${CMAKE_OPTIONS[*]}"

installed_ok() { [[ -x "$server" && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]]; }

fetch_source() {
  if [[ -d "$src/.git" && "$(git -C "$src" rev-parse HEAD 2>/dev/null)" == "$LLAMA_COMMIT" ]]; then
    return
  fi
  for tool in npm git; do
    command -v "$tool" >/dev/null || { echo "fetch_llama: $tool not found (run scripts/setup.sh)" >&2; exit 1; }
  done
  echo "fetch_llama: fetching llama.cpp's source from $PACKAGE into $src" >&2
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack "$PACKAGE" --loglevel=error >/dev/null)
  local tarball=("$work"/*.tgz)
  if ! echo "$PACKAGE_SHA256  ${tarball[0]}" | sha256sum --check --status; then
    echo "fetch_llama: $PACKAGE does not match the pinned sha256 $PACKAGE_SHA256" >&2
    exit 1
  fi
  tar -xzf "${tarball[0]}" -C "$work" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
  echo "fetch_llama: $(tr -d ' \n' <"$work/package/llama/llama.cpp.info.json")" >&2
  rm -rf "$src"
  git -c advice.detachedHead=false clone --quiet "$work/package/llama/gitRelease.bundle" "$src"
  local head
  head="$(git -C "$src" rev-parse HEAD)"
  [[ "$head" == "$LLAMA_COMMIT" ]] || { echo "fetch_llama: the bundle's HEAD is $head, not $LLAMA_COMMIT" >&2; exit 1; }
}

build_server() {
  for tool in cmake ninja c++; do
    command -v "$tool" >/dev/null || { echo "fetch_llama: $tool not found (run scripts/setup.sh)" >&2; exit 1; }
  done
  local launcher=()
  if command -v ccache >/dev/null; then
    # As scripts/build.sh: one cache for every clone. The base folder is tools/llama (source and build folders
    # both), so the paths ccache hashes are relative and a clone in another folder hits.
    export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/prefixgate-ccache}
    export CCACHE_NOHASHDIR=1
    export CCACHE_BASEDIR=$base
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  echo "fetch_llama: building llama-server in $build (a few minutes on 2 cores the first time)" >&2
  local started=$SECONDS
  cmake -S "$src" -B "$build" -G Ninja "${CMAKE_OPTIONS[@]}" "${launcher[@]}" >"$base/cmake.log" 2>&1 \
    || { tail -n 40 "$base/cmake.log" >&2; echo "fetch_llama: cmake failed (log: $base/cmake.log)" >&2; exit 1; }
  ninja -C "$build" -j 2 llama-server >"$base/build.log" 2>&1 \
    || { tail -n 40 "$base/build.log" >&2; echo "fetch_llama: build failed (log: $base/build.log)" >&2; exit 1; }
  echo "fetch_llama: built in $((SECONDS - started)) s" >&2
  mkdir -p "${server%/*}"
  install -m 0755 "$build/bin/llama-server" "$server"
  echo "$want_stamp" >"$stamp"
}

if ! installed_ok; then
  fetch_source
  build_server
fi
# make_model.py writes the test model with the source's gguf-py: a server kept from an earlier run is not enough.
[[ -d "$src/gguf-py" ]] || fetch_source
installed_ok || { echo "fetch_llama: $server missing or not built from $PACKAGE after install" >&2; exit 1; }
echo "$server"
