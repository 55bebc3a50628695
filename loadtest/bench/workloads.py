"""The synthetic workloads, each a seeded generator (same parameters and seed, same requests):

- shared-prefix: SGLang's generated-shared-prefix (groups of prompts sharing a system prompt);
- multi-turn: chat users whose every turn resends the whole conversation so far, the engine's own replies included;
- capacity-pressure: llm-d's profile (150 groups x 6,000-token prefix, working set ~73 % of the fleet's KV cache,
  rates stepped upward), a fresh question in every request, so only the shared prefixes can hit (the headline);
- capacity-pressure-repeating: the same with every request one of 750 fixed (group, user) prompts drawn with
  replacement, so most requests repeat an earlier prompt exactly (kept for comparison; inflates the bound).
The Mooncake trace replayer lives in trace.py.

Token scale. One Python client cannot stream a full-size run's millions of SSE events in minutes on two cores, so
each workload has a `token_scale` k: every token count (prompt, question, output, KV capacity) is multiplied by k
and the simulator is told (`--token-scale k`) to scale its own rates to match (prefill rate, decode costs, token
budget). Every simulated duration (prefill, decode, queueing) and every ratio (working set / KV capacity, hit
ratios) is then the same as at full size, with k times fewer tokens and SSE events. k = 1 is the unscaled workload.
"""
import json
import random
from dataclasses import dataclass, fields

from bench.model import BenchRequest, Session, Workload
from bench.textgen import cached_sequence, engine_block_keys, engine_tokens, predicted_reply, text_tokens, words

MODEL = "sim-model"
SIM_KV_CAPACITY_TOKENS = 400000   # the simulator's default KV cache per pod (full-size tokens)


def scaled(tokens, k):
    """A token count at token scale k (at least 1)."""
    return max(1, round(tokens * k))


def scaled_sim_args(k):
    """Simulator flags that keep every simulated duration unchanged at token scale k (the simulator scales its
    prefill rate, decode costs and token budget itself; the KV capacity is passed in scaled tokens)."""
    return ["--token-scale", f"{k:g}"]


def chat_request_and_reply(rid, messages, max_tokens, group=0, stage=0, at_s=0.0):
    """A streaming chat completion with its engine prompt size and block keys, and the reply text the engine will
    generate for it (textgen.predicted_reply; the blocks of prompt + reply, but its last token, are what the
    engine caches)."""
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    tokens = engine_tokens(messages)
    reply = predicted_reply(tokens, max_tokens)
    req = BenchRequest(rid=rid, path="/v1/chat/completions", body=json.dumps(body).encode(),
                       prompt_tokens=len(tokens), max_tokens=max_tokens, block_keys=engine_block_keys(tokens),
                       cache_keys=engine_block_keys(cached_sequence(tokens, text_tokens(reply))), group=group,
                       stage=stage,
                       at_s=at_s)
    return req, reply


def chat_request(rid, messages, max_tokens, group=0, stage=0, at_s=0.0):
    return chat_request_and_reply(rid, messages, max_tokens, group, stage, at_s)[0]


def poisson_times(rng, rate, count, start=0.0):
    """`count` arrival times of a Poisson process of `rate` per second, from `start`."""
    t, out = start, []
    for _ in range(count):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def zipf_weights(n, s):
    return [1.0 / (i + 1) ** s for i in range(n)]


# --- shared-prefix --------------------------------------------------------------------------------------------
@dataclass
class SharedPrefixParams:
    groups: int = 64
    prompts_per_group: int = 16
    system_tokens: int = 2048
    question_tokens: int = 128
    output_tokens: int = 256
    popularity: str = "uniform"      # uniform: every prompt once; zipf: each request's group drawn by Zipf(s)
    zipf_s: float = 1.1
    rate: float = 64.0               # requests per simulated second (Poisson)
    token_scale: float = 0.25
    kv_capacity_tokens: int = SIM_KV_CAPACITY_TOKENS   # per pod, unscaled
    time_scale: float = 0.5          # simulator speed: wall seconds per simulated second


def shared_prefix(p, pods, seed):
    """SGLang's generated-shared-prefix: `groups` system prompts, `prompts_per_group` questions each, shuffled."""
    k, rng = p.token_scale, random.Random(seed)
    count = p.groups * p.prompts_per_group
    if p.popularity == "zipf":
        picks = rng.choices(range(p.groups), weights=zipf_weights(p.groups, p.zipf_s), k=count)
    elif p.popularity == "uniform":
        picks = [g for g in range(p.groups) for _ in range(p.prompts_per_group)]
        rng.shuffle(picks)
    else:
        raise ValueError(f"shared-prefix.popularity: expected uniform or zipf, got {p.popularity!r}")
    times = poisson_times(rng, p.rate, count)
    sessions = []
    for rid, (group, t) in enumerate(zip(picks, times)):
        messages = [{"role": "system", "content": words(("sp-system", seed, group), scaled(p.system_tokens, k))},
                    {"role": "user", "content": words(("sp-question", seed, rid), scaled(p.question_tokens, k))}]
        sessions.append(Session(t, [chat_request(rid, messages, scaled(p.output_tokens, k), group=group, at_s=t)]))
    return Workload(
        name="shared-prefix", title="Shared-prefix groups (SGLang generated-shared-prefix)",
        description=(f"{p.groups} groups x {p.prompts_per_group} prompts ({count} requests, {p.popularity} group "
                     f"popularity), each a {p.system_tokens}-token group system prompt + a {p.question_tokens}-token "
                     f"question, {p.output_tokens} output tokens; Poisson arrivals at {p.rate:g} req/s."),
        sessions=sessions, kv_capacity_tokens=scaled(p.kv_capacity_tokens, k), sim_args=scaled_sim_args(k),
        params=vars(p).copy(), time_scale=p.time_scale)


# --- multi-turn -----------------------------------------------------------------------------------------------
@dataclass
class MultiTurnParams:
    users: int = 48
    turns: int = 6
    system_tokens: int = 1024        # shared by every user
    context_tokens: int = 1536       # the user's own document, in the first turn
    question_tokens: int = 128       # each turn's new user message
    answer_tokens: int = 256         # output tokens per turn; the reply is added to the history
    think_s: float = 2.0             # mean pause between a reply and the next turn (exponential)
    user_rate: float = 4.0           # users starting per simulated second (Poisson)
    token_scale: float = 0.25
    kv_capacity_tokens: int = SIM_KV_CAPACITY_TOKENS
    time_scale: float = 0.5


def multi_turn(p, pods, seed):
    """Users in interleaved conversations: each turn sends the system prompt, the whole history and a new question.
    The assistant message of each turn's history is the exact reply the engine generated for the previous turn
    (textgen.predicted_reply), so, as with vLLM, the engine's cached output blocks can hit on the next turn."""
    k, rng = p.token_scale, random.Random(seed)
    system = words(("mt-system", seed), scaled(p.system_tokens, k))
    starts = poisson_times(rng, p.user_rate, p.users)
    sessions, rid = [], 0
    for user, start in enumerate(starts):
        history = [{"role": "system", "content": system}]
        requests = []
        for turn in range(p.turns):
            question = words(("mt-question", seed, user, turn), scaled(p.question_tokens, k))
            if turn == 0:
                question = words(("mt-context", seed, user), scaled(p.context_tokens, k)) + question
            history.append({"role": "user", "content": question})
            req, reply = chat_request_and_reply(rid, list(history), scaled(p.answer_tokens, k), group=user,
                                                at_s=start)
            requests.append(req)
            history.append({"role": "assistant", "content": reply})
            rid += 1
        think = [rng.expovariate(1.0 / p.think_s) if p.think_s > 0 else 0.0 for _ in range(p.turns - 1)]
        sessions.append(Session(start, requests, think))
    return Workload(
        name="multi-turn", title="Multi-turn chat (every turn resends the conversation)",
        description=(f"{p.users} users x {p.turns} turns ({p.users * p.turns} requests); a {p.system_tokens}-token "
                     f"system prompt shared by all, a {p.context_tokens}-token document per user in the first turn, "
                     f"{p.question_tokens}-token questions, {p.answer_tokens}-token answers; each turn's history "
                     f"carries the engine's exact previous replies; users start at {p.user_rate:g}/s (Poisson) and "
                     f"pause {p.think_s:g} s (mean) between turns."),
        sessions=sessions, kv_capacity_tokens=scaled(p.kv_capacity_tokens, k), sim_args=scaled_sim_args(k),
        params=vars(p).copy(), time_scale=p.time_scale)


# --- capacity-pressure ----------------------------------------------------------------------------------------
@dataclass
class CapacityPressureParams:
    groups: int = 150
    prefix_tokens: int = 6000
    question_tokens: int = 1200
    output_tokens: int = 1000
    working_set_fraction: float = 0.73   # all groups' prefixes / the whole fleet's KV capacity
    rates: str = "6,8,9,10,11"           # requests per simulated second, one stage each (see below)
    stage_s: float = 36.0                # simulated seconds per stage; the first third (12 s, about one request's
    #                                      end-to-end time at 1,000 output tokens) is warm-up, see stats.py
    token_scale: float = 0.125
    time_scale: float = 0.2              # 5x faster than real time: the run's wall time is the budget's main cost
    # The rates bracket the simulated fleet's capacity: with the vLLM-faithful simulator (KV-bound batches,
    # preemption), cache-blind routing saturates between 8 and 9 req/s while the finite-cache oracle still holds
    # at 11 (8 pods). The top stages are the highest the best routing sustains, the regime llm-d's profile shows:
    # beyond it every strategy's queue grows for the whole stage and a steady-state figure means nothing (a
    # first calibration at 12 and 14 req/s had every strategy, the oracle included, "not steady" there). They
    # were 6-36 req/s with the first, faster simulator (llm-d's own fleet ran its profile up to 36 req/s).


@dataclass
class CapacityPressureRepeatingParams(CapacityPressureParams):
    users_per_group: int = 5             # fixed questions per group; groups x users prompts drawn with replacement


def stage_arrivals(rng, rates, stage_s):
    """[(stage index, arrival time)] of Poisson arrivals at each rate for stage_s seconds, stages back to back."""
    out, t0 = [], 0.0
    for stage, rate in enumerate(rates):
        t = t0
        while True:
            t += rng.expovariate(rate)
            if t >= t0 + stage_s:
                break
            out.append((stage, t))
        t0 += stage_s
    return out


def _capacity_pressure(p, pods, seed, repeating):
    k, rng = p.token_scale, random.Random(seed)
    prefix_tokens, question_tokens = scaled(p.prefix_tokens, k), scaled(p.question_tokens, k)
    kv_capacity = round(p.groups * prefix_tokens / p.working_set_fraction / pods)
    prefixes = [words(("cp-prefix", seed, g), prefix_tokens) for g in range(p.groups)]
    rates = [float(r) for r in str(p.rates).split(",") if r.strip()]
    sessions = []
    for rid, (stage, t) in enumerate(stage_arrivals(rng, rates, p.stage_s)):
        group = rng.randrange(p.groups)
        if repeating:
            question = words(("cp-question", seed, group, rng.randrange(p.users_per_group)), question_tokens)
        else:
            question = words(("cp-fresh-question", seed, rid), question_tokens)
        messages = [{"role": "system", "content": prefixes[group]}, {"role": "user", "content": question}]
        sessions.append(Session(t, [chat_request(rid, messages, scaled(p.output_tokens, k), group=group,
                                                 stage=stage, at_s=t)]))
    count = len(sessions)
    stepped = (f"Poisson arrivals stepped through {', '.join(f'{r:g}' for r in rates)} req/s, {p.stage_s:g} s each "
               f"({count} requests). The groups' prefixes are {p.working_set_fraction:.0%} of the fleet's KV cache "
               f"({pods} pods x {kv_capacity} tokens at this token scale).")
    if repeating:
        return Workload(
            name="capacity-pressure-repeating",
            title="Capacity pressure, repeating prompts (750 fixed prompts drawn with replacement; not the headline)",
            description=(f"{p.groups} groups x {p.prefix_tokens}-token shared prefix, {p.users_per_group} fixed "
                         f"{p.question_tokens}-token questions per group: every request is one of "
                         f"{p.groups * p.users_per_group} fixed prompts drawn with replacement, so most requests "
                         f"repeat an earlier prompt exactly and the upper bound is inflated by whole-prompt hits. "
                         f"{p.output_tokens} output tokens; " + stepped),
            sessions=sessions, kv_capacity_tokens=kv_capacity, sim_args=scaled_sim_args(k), params=vars(p).copy(),
            time_scale=p.time_scale,
            stages=[(r, p.stage_s) for r in rates])
    return Workload(
        name="capacity-pressure", title="Capacity pressure (llm-d's profile, a fresh question in every request)",
        description=(f"{p.groups} groups x {p.prefix_tokens}-token shared prefix; every request is a group prefix "
                     f"(uniform) + a fresh {p.question_tokens}-token question never sent before, so only the shared "
                     f"prefixes can hit; {p.output_tokens} output tokens; " + stepped),
        sessions=sessions, kv_capacity_tokens=kv_capacity, sim_args=scaled_sim_args(k), params=vars(p).copy(),
        time_scale=p.time_scale,
        stages=[(r, p.stage_s) for r in rates])


def capacity_pressure(p, pods, seed):
    """llm-d's capacity-pressure profile: every request is a group prefix + a fresh question (seeded by the request
    id), Poisson arrivals at stepped rates. The per-pod KV capacity is set so that the groups' prefixes fill
    `working_set_fraction` of the fleet's cache."""
    return _capacity_pressure(p, pods, seed, repeating=False)


def capacity_pressure_repeating(p, pods, seed):
    """The same profile with every request one of groups x users_per_group fixed prompts, drawn uniformly with
    replacement (the benchmark's first version; most requests repeat an earlier prompt exactly)."""
    return _capacity_pressure(p, pods, seed, repeating=True)


PARAMS = {"shared-prefix": SharedPrefixParams, "multi-turn": MultiTurnParams,
          "capacity-pressure": CapacityPressureParams,
          "capacity-pressure-repeating": CapacityPressureRepeatingParams}
BUILDERS = {"shared-prefix": shared_prefix, "multi-turn": multi_turn, "capacity-pressure": capacity_pressure,
            "capacity-pressure-repeating": capacity_pressure_repeating}


def apply_overrides(params, overrides):
    """Sets dataclass fields from {"name": "text"}, converting to each field's type; unknown names are errors."""
    types = {f.name: f.type for f in fields(params)}
    for name, text in overrides.items():
        if name not in types:
            raise ValueError(f"unknown parameter {name!r} (known: {', '.join(types)})")
        kind = types[name] if isinstance(types[name], type) else type(getattr(params, name))
        if kind is bool and isinstance(text, str):   # bool("false") would be True
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"parameter {name!r}: expected true or false, got {text!r}")
            setattr(params, name, text.lower() in ("true", "1", "yes"))
            continue
        setattr(params, name, kind(text))
    return params
