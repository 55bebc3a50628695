"""oracle.choose: the finite-cache oracle's pick, by hand-computed blend scores."""
import random

import pytest

from bench.oracle import PodView, blend_scores, choose


def pod(name, cached=0, prompt=100, in_flight=0, kv=0.0):
    return PodView(name, cached, prompt, in_flight, kv)


def test_blend_score_by_hand():
    """Ensures score = 5 x cached / prompt + 4 x (hi - load) / (hi - lo), load = in flight x (1 + 2 x kv^2)."""
    scores = blend_scores([pod("a", cached=80, in_flight=2, kv=0.5), pod("b", in_flight=1), pod("c", in_flight=4)])
    # loads: a 2 x 1.5 = 3, b 1, c 4 -> lo 1, hi 4
    assert scores["a"] == pytest.approx(5 * 0.8 + 4 * (4 - 3) / 3)
    assert scores["b"] == pytest.approx(4.0) and scores["c"] == pytest.approx(0.0)
    equal = blend_scores([pod("a", cached=50, in_flight=2), pod("b", in_flight=2)])
    assert equal == {"a": pytest.approx(2.5 + 4), "b": pytest.approx(4.0)}   # all loads equal: load term 1 each


def test_the_longest_real_prefix_wins_unless_its_pod_is_much_busier():
    """Ensures a 90 % cached pod with 2 in flight beats an idle empty one (4.5 > 4), and a 50 % one with 4 does
    not (2.5 < 4)."""
    assert choose([pod("hit", cached=90, in_flight=2), pod("idle")], random.Random(1)) == "hit"
    assert choose([pod("half", cached=50, in_flight=4), pod("idle")], random.Random(1)) == "idle"


def test_kv_usage_weighs_the_load():
    """Ensures KV usage raises the load: 2 in flight at 0.9 usage (load 5.24) is busier than 3 at 0 (load 3)."""
    pods = [pod("full", cached=10, in_flight=2, kv=0.9), pod("busy", cached=10, in_flight=3), pod("x", in_flight=6)]
    # loads 5.24, 3, 6 -> normalised 0.25, 1, 0
    assert choose(pods, random.Random(1)) == "busy"
    assert choose([pod("full", cached=10, in_flight=2), pod("busy", cached=10, in_flight=3), pod("x", in_flight=6)],
                  random.Random(1)) == "full"


def test_pods_above_90_percent_kv_are_excluded_unless_all_are():
    """Ensures a pod above 0.90 KV usage is not chosen however good its match, unless every pod is above."""
    assert choose([pod("full", cached=99, kv=0.91), pod("empty", kv=0.2)], random.Random(1)) == "empty"
    assert choose([pod("edge", cached=99, kv=0.90), pod("empty", kv=0.2)], random.Random(1)) == "edge"
    assert choose([pod("full", cached=99, kv=0.95), pod("fuller", kv=0.99)], random.Random(1)) == "full"


def test_ties_go_to_fewer_in_flight_then_to_a_seeded_random_pick():
    """Ensures equal scores pick the pod with fewer requests in flight, then at random with the given generator."""
    # Equal loads (2 x 1 = 1 x (1 + 2 x 0.5)) and matches, different in-flight counts.
    assert choose([pod("two", in_flight=2), pod("one", in_flight=1, kv=0.5 ** 0.5)], random.Random(1)) == "one"
    pods = [pod(name) for name in "abcd"]
    picks = [choose(pods, random.Random(seed)) for seed in range(40)]
    assert picks == [choose(pods, random.Random(seed)) for seed in range(40)]   # seeded
    assert set(picks) == set("abcd")                                             # every tied pod possible


def test_an_empty_prompt_or_pod_list():
    """Ensures a zero-token prompt scores no prefix (no division by zero) and no pods is an error."""
    assert choose([pod("a", prompt=0, in_flight=1), pod("b", prompt=0)], random.Random(1)) == "b"
    with pytest.raises(ValueError):
        choose([], random.Random(1))
