import sys
from pathlib import Path

import pytest

# The process harness lives with the load-test tools (the demo and the benchmarks use it too).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from harness import Gateway, Sim  # noqa: E402


@pytest.fixture
def sims(tmp_path):
    """Three simulated engine pods (20x faster than real time), stopped after the test."""
    started = [Sim(tmp_path, f"engine-{i}") for i in range(3)]
    yield started
    for s in started:
        s.stop()


@pytest.fixture
def gateway_factory(tmp_path):
    """Builds gateways in front of given pods; every one is stopped after the test."""
    made = []

    def make(pods, **kwargs):
        g = Gateway(tmp_path, pods, name=f"gateway{len(made)}", **kwargs)
        made.append(g)
        return g

    yield make
    for g in made:
        g.stop()
