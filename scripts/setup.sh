#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and benchmark prefixgate. Idempotent, and fast
# (a few dpkg queries) when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost1.81-dev            # Beast/Asio (libboost-dev is 1.74: do not use it)
  libsimdjson-dev libxxhash-dev prometheus-cpp-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev    # the libFuzzer targets (scripts/fuzz.sh): clang 14 and its fuzzer/sanitizer runtimes
  libssl-dev openssl          # HTTPS to the Kubernetes API server; the CLI makes the test certificates
  libzmq3-dev cppzmq-dev      # KV cache events (ZMQ), published by the engine simulator
  python3-zmq python3-msgpack # KV event tests speak ZMQ and msgpack from Python
  python3 python3-pytest python3-prometheus-client python3-yaml python3-matplotlib
  python3-numpy               # tools/llama/make_model.py writes the test engine's random-weight model
  nginx haproxy wrk           # the proxy overhead benchmark's peers and load generator
  linux-perf                  # loadtest/overhead/syscalls.py and sse_sched.py: `perf stat`, `perf sched`
  valgrind                    # callgrind_request.py and tools/decision_instructions.py count instructions
  redis-server redis-tools    # replica state sync tests run a real Redis
)
# Node.js with npm fetches the tiktoken vocabulary and runs the reference encoder in exactness tests. Some images
# ship Node.js (with npm inside) from another source: take Debian's only when there is none.
command -v npm >/dev/null 2>&1 || PACKAGES+=(nodejs npm)

missing=()
for pkg in "${PACKAGES[@]}"; do
  [[ "$pkg" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ -x scripts/fetch_tiktoken.sh ]]; then
  scripts/fetch_tiktoken.sh >/dev/null
fi
# The OpenAI and Anthropic JavaScript SDKs (pinned in tools/sdk/package-lock.json) for
# tests/integration/test_sdk_conformance.py; the image build has no tools/sdk (or sets PREFIXGATE_SETUP_NO_SDK=1).
# `npm ci` only when a package of the lock file is missing or at another version, so a second run does nothing.
if [[ -f tools/sdk/package-lock.json && -z "${PREFIXGATE_SETUP_NO_SDK:-}" ]]; then
  if ! node -e 'const lock = require("./tools/sdk/package-lock.json");
      for (const [path, pkg] of Object.entries(lock.packages))
        if (path && !pkg.optional &&
            require("./tools/sdk/" + path + "/package.json").version !== pkg.version) process.exit(1);' \
      2>/dev/null; then
    echo "setup: installing the SDKs of tools/sdk/package-lock.json"
    (cd tools/sdk && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
fi
# helm (not a Debian package) for the chart's tests; the image build needs none (PREFIXGATE_SETUP_NO_HELM=1).
if [[ -x scripts/fetch_helm.sh && -z "${PREFIXGATE_SETUP_NO_HELM:-}" ]]; then
  scripts/fetch_helm.sh >/dev/null
fi
# llama.cpp's llama-server (built from the npm package node-llama-cpp's source bundle) for the tests against a real
# engine; the image build needs none (PREFIXGATE_SETUP_NO_LLAMA=1). A few minutes the first time, then nothing.
if [[ -x scripts/fetch_llama.sh && -z "${PREFIXGATE_SETUP_NO_LLAMA:-}" ]]; then
  scripts/fetch_llama.sh >/dev/null
fi
echo "setup: all build and test dependencies are present"
