"""real_workloads: the real-engine workloads are seeded, closed loop, of the issue's size, and a multi-turn
conversation is built from the engine's replies at send time."""
import json

from bench import real_workloads
from bench.real_workloads import english


def test_english_is_seeded_prose():
    """Ensures the same seed gives the same text and another seed another, with the word count asked for,
    sentences capitalised and ended by a period."""
    text = english(("x", 1), 50)
    assert text == english(("x", 1), 50) and text != english(("x", 2), 50)
    assert len(text.split()) == 50 and text[0].isupper() and text.endswith(".")
    assert english("y", 0) == ""


def test_shared_prefix_is_the_issues_measurement():
    """Ensures shared-prefix is 8 groups x 12 prompts (96 streamed requests with usage), shuffled by the seed, each
    a group system prompt + its own question, 16 output tokens, closed loop with 4 users, on 2-slot pods of 8,192
    tokens with the default host cache; the KV-pressure variant only shrinks the context and drops the cache."""
    w = real_workloads.build("shared-prefix", {}, 1)
    reqs = w.requests()
    assert len(reqs) == 96 and w.mode == "closed" and w.concurrency == 4 and w.time_scale == 1.0
    bodies = [json.loads(r.body) for r in reqs]
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} and b["max_tokens"] == 16
               for b in bodies)
    by_group = {}
    for r, b in zip(reqs, bodies):
        by_group.setdefault(r.group, set()).add(b["messages"][0]["content"])
    assert sorted(by_group) == list(range(8)) and all(len(s) == 1 for s in by_group.values())
    assert len({b["messages"][1]["content"] for b in bodies}) == 96
    assert [r.group for r in reqs] != sorted(r.group for r in reqs)                  # shuffled
    assert [r.group for r in reqs] == [r.group for r in real_workloads.build("shared-prefix", {}, 1).requests()]
    assert [r.group for r in reqs] != [r.group for r in real_workloads.build("shared-prefix", {}, 2).requests()]
    assert (w.params["parallel"], w.params["ctx"], w.params["cache_ram_mib"]) == (2, 8192, -1)
    kv = real_workloads.build("shared-prefix-kv", {}, 1)
    assert [r.body for r in kv.requests()] == [r.body for r in reqs]
    assert (kv.params["parallel"], kv.params["ctx"], kv.params["cache_ram_mib"]) == (2, 4096, 0)


def test_multi_turn_sessions_carry_the_replies():
    """Ensures multi-turn is 16 users x 6 turns of conversations built at send time (carry_replies): the first turn
    adds the shared system prompt and the user's document with the question, each later turn its question; every
    user shares the system prompt and nothing else."""
    w = real_workloads.build("multi-turn", {}, 3)
    assert len(w.sessions) == 16 and all(len(s.requests) == 6 and s.carry_replies for s in w.sessions)
    first = [s.requests[0].new_messages for s in w.sessions]
    assert all(m[0]["role"] == "system" and m[1]["role"] == "user" for m in first)
    assert len({m[0]["content"] for m in first}) == 1 and len({m[1]["content"] for m in first}) == 16
    later = w.sessions[0].requests[1]
    assert later.new_messages == [{"role": "user", "content": later.new_messages[0]["content"]}]
    assert later.body == b"" and later.body_fields["max_tokens"] == 16 and "messages" not in later.body_fields
    assert {r.group for r in w.sessions[5].requests} == {5}
    assert sorted(r.rid for r in w.requests()) == list(range(96))


def test_parameters_override_and_unknown_ones_fail():
    """Ensures --param values are converted to each field's type and an unknown name is refused."""
    w = real_workloads.build("shared-prefix", {"groups": "2", "prompts_per_group": "3", "ctx": "2048"}, 1)
    assert len(w.requests()) == 6 and w.params["ctx"] == 2048
    try:
        real_workloads.build("multi-turn", {"nope": "1"}, 1)
    except ValueError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("an unknown parameter was accepted")
