"""workloads: seeded, the fresh and repeating capacity-pressure variants, stage boundaries, multi-turn histories."""
import json

from bench import workloads
from bench.model import BenchRequest
from bench.textgen import engine_block_keys, engine_token_count, engine_tokens, predicted_reply, text_tokens
from bench.upper_bound import upper_bound_tokens

SMALL = {"groups": "6", "rates": "10,20", "stage_s": "3", "output_tokens": "160"}


def build(name, seed=1, pods=2, **overrides):
    params = workloads.apply_overrides(workloads.PARAMS[name](), overrides)
    return workloads.BUILDERS[name](params, pods, seed)


def messages(req):
    return json.loads(req.body)["messages"]


def test_same_seed_same_requests_other_seed_other_requests():
    """Ensures every workload is a pure function of its parameters and seed."""
    for name, params in [("shared-prefix", {"groups": "3", "prompts_per_group": "2"}),
                         ("multi-turn", {"users": "2", "turns": "2"}), ("capacity-pressure", SMALL),
                         ("capacity-pressure-repeating", SMALL)]:
        one, again, other = build(name, 1, **params), build(name, 1, **params), build(name, 2, **params)
        assert [(s.start_s, [r.body for r in s.requests]) for s in one.sessions] == \
               [(s.start_s, [r.body for r in s.requests]) for s in again.sessions], name
        assert [r.body for r in one.requests()] != [r.body for r in other.requests()], name


def test_prompt_sizes_and_keys_follow_the_engine_tokenization():
    """Ensures each request's prompt size matches the closed-form count and its keys the engine's token ids, and
    its cache keys extend them with the predicted reply's blocks."""
    for req in build("capacity-pressure", **SMALL).requests()[:20]:
        tokens = engine_tokens(messages(req))
        assert req.prompt_tokens == engine_token_count(messages(req)) == len(tokens)
        assert req.block_keys == engine_block_keys(tokens)
        reply = text_tokens(predicted_reply(tokens, req.max_tokens))
        assert req.cache_keys == engine_block_keys(tokens + reply[:-1])    # the last output token has no KV
        assert req.cache_keys[:len(req.block_keys)] == req.block_keys and len(req.cache_keys) > len(req.block_keys)


def test_fresh_capacity_pressure_never_repeats_a_question():
    """Ensures the headline variant sends a question never sent before in every request, so only the group
    prefixes can hit; the repeating variant draws from groups x users fixed prompts and does repeat."""
    fresh = build("capacity-pressure", **SMALL).requests()
    questions = [messages(r)[1]["content"] for r in fresh]
    assert len(fresh) > 40 and len(set(questions)) == len(questions)
    assert len({messages(r)[0]["content"] for r in fresh}) <= 6
    repeating = build("capacity-pressure-repeating", **SMALL, users_per_group="2").requests()
    prompts = [r.body for r in repeating]
    assert len(set(prompts)) <= 6 * 2 < len(prompts)
    assert "repeating" in build("capacity-pressure-repeating", **SMALL).title


def test_fresh_variant_bound_comes_from_prefixes_only():
    """Ensures the fresh variant's bound is at most the shared-prefix part, below the repeating variant's."""
    fresh = build("capacity-pressure", **SMALL).requests()
    bound = upper_bound_tokens(fresh)
    for req in fresh:
        system = messages(req)[0]["content"]
        shared = 1 + len(system.encode()) // 4 + 1 + 1           # <|system|> words <|end|> <|user|>
        assert bound[req.rid] <= shared // 16 * 16
    repeating = build("capacity-pressure-repeating", **SMALL, users_per_group="1").requests()
    fraction = lambda reqs: sum(upper_bound_tokens(reqs).values()) / sum(r.prompt_tokens for r in reqs)  # noqa
    assert fraction(repeating) > fraction(fresh)


def test_stages_are_back_to_back_and_every_request_is_inside_its_stage():
    """Ensures stage i covers [i x stage_s, (i + 1) x stage_s) and each request's arrival lies in its own stage."""
    w = build("capacity-pressure", **SMALL)
    assert w.stages == [(10.0, 3.0), (20.0, 3.0)]
    for session in w.sessions:
        (req,) = session.requests
        assert req.at_s == session.start_s
        assert req.stage * 3.0 <= req.at_s < (req.stage + 1) * 3.0
    per_stage = [sum(1 for r in w.requests() if r.stage == i) for i in range(2)]
    assert 10 <= per_stage[0] <= 55 and 30 <= per_stage[1] <= 95    # Poisson around 30 and 60


def test_kv_capacity_follows_the_working_set_fraction():
    """Ensures the per-pod KV capacity makes the groups' prefixes the set fraction of the fleet's cache."""
    w = build("capacity-pressure", pods=4, groups="10", prefix_tokens="800", working_set_fraction="0.5", rates="1",
              stage_s="2")
    assert w.kv_capacity_tokens == round(10 * 100 / 0.5 / 4)       # 800 x 0.125 = 100 tokens per prefix
    assert w.sim_args == ["--token-scale", "0.125"] == workloads.scaled_sim_args(0.125)


def test_multi_turn_history_carries_the_engines_exact_replies():
    """Ensures turn i + 1 resends turn i's messages plus the reply the engine generates for turn i, so the next
    prompt starts with every block the engine cached for turn i (prompt + reply)."""
    w = build("multi-turn", users="2", turns="3")
    for session in w.sessions:
        for prev, nxt in zip(session.requests, session.requests[1:]):
            before, after = messages(prev), messages(nxt)
            assert after[:len(before)] == before
            reply = predicted_reply(engine_tokens(before), prev.max_tokens)
            assert after[len(before)] == {"role": "assistant", "content": reply}
            assert nxt.block_keys[:len(prev.cache_keys)] == prev.cache_keys
    reqs = w.requests()
    without_replies = [BenchRequest(**{**vars(r), "cache_keys": []}) for r in reqs]
    order = sorted(reqs, key=lambda r: (r.group, r.rid))
    assert sum(upper_bound_tokens(order).values()) > sum(
        upper_bound_tokens(sorted(without_replies, key=lambda r: (r.group, r.rid))).values())


def test_overrides_convert_types_and_reject_unknown_names():
    """Ensures --param values take the field's type and unknown names fail."""
    p = workloads.apply_overrides(workloads.CapacityPressureRepeatingParams(), {"groups": "7", "stage_s": "2.5",
                                                                               "users_per_group": "3"})
    assert (p.groups, p.stage_s, p.users_per_group) == (7, 2.5, 3)
    try:
        workloads.apply_overrides(workloads.CapacityPressureParams(), {"users_per_group": "3"})
    except ValueError as exc:
        assert "users_per_group" in str(exc)
    else:
        raise AssertionError("the fresh variant has no users_per_group")
