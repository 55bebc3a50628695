"""Unit tests of the benchmark tooling (loadtest/bench, loadtest/provenance.py): pure functions checked against
hand-computed cases. Run: /usr/bin/python3 -m pytest -q tests/unit/bench"""
import sys
from pathlib import Path

LOADTEST = Path(__file__).resolve().parents[3] / "loadtest"
if str(LOADTEST) not in sys.path:
    sys.path.insert(0, str(LOADTEST))
