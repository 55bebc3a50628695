#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build the gateway and the engine simulator, then run
# a short shared-prefix workload through the gateway in front of simulated pods and print what happened.
# Extra arguments go to loadtest/demo.py (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release prefixgate prefixgate-engine-sim
exec /usr/bin/python3 loadtest/demo.py "$@"
