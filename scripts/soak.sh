#!/usr/bin/env bash
# The soak (docs/testing.md, "Soak"): builds the release gateway and engine simulator, then runs loadtest/soak.py
# for SECONDS (default 1800) of normal and hostile traffic with pod churn. It exits non-zero when a rule is broken.
# Usage: scripts/soak.sh [SECONDS] [--out DIR]     e.g. scripts/soak.sh 1800 --out docs/soak
#        (the samples and summary go to DIR, default soak-out/; the processes' logs to a temporary folder, kept
#        only when the run failed)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-1800}
shift || true
scripts/build.sh release prefixgate prefixgate-engine-sim
exec /usr/bin/python3 loadtest/soak.py --duration "$seconds" "$@"
