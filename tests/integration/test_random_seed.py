"""random_seed through the real gateway: with one event-loop thread, a non-zero seed replays the same choices and
request ids; another seed, or 0 (random), does not."""
import pytest

from harness import Gateway, Sim, wait_until

PODS = 4
REQUESTS = 24


@pytest.fixture(scope="module")
def four_sims(tmp_path_factory):
    """Four simulated pods shared by every gateway of this module (the sequences name pods, not ports)."""
    folder = tmp_path_factory.mktemp("random-seed-sims")
    started = [Sim(folder, f"engine-{i}") for i in range(PODS)]
    yield started
    for s in started:
        s.stop()


def run_sequence(tmp_path, sims, seed, name):
    """Starts a gateway (threads: 1, strategy random, random_seed: `seed`), waits until every pod is ready (a pod
    not yet ready would shrink the candidate list and change the draws), sends REQUESTS sequential requests and
    returns ([target-pod], [request-id]) in order."""
    gw = Gateway(tmp_path, sims, name=name,
                 config={"threads": 1, "routing": {"strategy": "random"}, "random_seed": seed, "log_level": "warn"})
    try:
        wait_until(lambda: sum(p["ready"] for p in gw.debug_pods()) == PODS, what="every pod ready")
        pods, ids = [], []
        for i in range(REQUESTS):
            status, headers, body = gw.chat(f"request {i}", max_tokens=1)
            assert status == 200, body
            assert headers["routing-strategy"] == "random"
            pods.append(headers["target-pod"])
            ids.append(headers["request-id"])
        return pods, ids
    finally:
        gw.stop()


def test_same_seed_replays_the_same_choices_and_another_seed_does_not(tmp_path, four_sims):
    """Two gateways with random_seed 7 send the 24 requests to the same pods in the same order and give them the
    same request ids; a gateway with random_seed 8 makes another sequence. The chance that two independent uniform
    sequences of 24 picks over 4 pods are equal is 4^-24 (about 3.6e-15), so a broken seed fails this test."""
    pods_a, ids_a = run_sequence(tmp_path, four_sims, 7, "seed7a")
    pods_b, ids_b = run_sequence(tmp_path, four_sims, 7, "seed7b")
    pods_c, ids_c = run_sequence(tmp_path, four_sims, 8, "seed8")
    assert len(set(pods_a)) > 1, f"random with seed 7 used one pod only: {pods_a}"
    assert pods_a == pods_b
    assert ids_a == ids_b
    assert pods_c != pods_a
    assert not set(ids_c) & set(ids_a)


def test_seed_zero_stays_random(tmp_path, four_sims):
    """random_seed 0 (the default) draws every seed from the system: two gateways make different sequences
    (equal with probability 4^-24, about 3.6e-15) and never repeat a request id."""
    pods_a, ids_a = run_sequence(tmp_path, four_sims, 0, "seed0a")
    pods_b, ids_b = run_sequence(tmp_path, four_sims, 0, "seed0b")
    assert pods_a != pods_b
    assert not set(ids_a) & set(ids_b)
