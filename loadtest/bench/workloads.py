"""The synthetic workloads, each a seeded generator (same parameters and seed, same requests):

- shared-prefix: SGLang's generated-shared-prefix (groups of prompts sharing a system prompt);
- multi-turn: chat users whose every turn resends the whole conversation so far;
- capacity-pressure: llm-d's profile (150 groups x 6,000-token prefix, working set ~73 % of the fleet's KV cache,
  rates stepped upward).
The Mooncake trace replayer lives in trace.py.

Token scale. One Python client cannot stream a full-size run's millions of SSE events in minutes on two cores, so
each workload has a `token_scale` k: every token count (prompt, question, output, KV capacity) is multiplied by k
and the simulator's rates are scaled to match (prefill rate x k, per-token decode costs / k). Every simulated
duration (prefill, decode, queueing) and every ratio (working set / KV capacity, hit ratios) is then the same as
at full size, with k times fewer tokens and SSE events. k = 1 is the unscaled workload.
"""
import json
import random
from dataclasses import dataclass, fields

from bench.model import BenchRequest, Session, Workload
from bench.textgen import chat_template, engine_block_keys, engine_token_count, words

MODEL = "sim-model"
# The simulator's defaults (prefixgate-engine-sim --help), scaled by token_scale.
SIM_PREFILL_TOKENS_PER_S = 25000.0
SIM_DECODE_MS_PER_TOKEN = 4.5
SIM_DECODE_MS_PER_RUNNING_SEQ = 0.046
SIM_KV_CAPACITY_TOKENS = 400000


def scaled(tokens, k):
    """A token count at token scale k (at least 1)."""
    return max(1, round(tokens * k))


def scaled_sim_args(k):
    """Simulator flags that keep every simulated duration unchanged at token scale k."""
    return ["--prefill-tokens-per-s", f"{SIM_PREFILL_TOKENS_PER_S * k:g}",
            "--decode-ms-per-token", f"{SIM_DECODE_MS_PER_TOKEN / k:g}",
            "--decode-ms-per-running-seq", f"{SIM_DECODE_MS_PER_RUNNING_SEQ / k:g}"]


def chat_request(rid, messages, max_tokens, group=0, stage=0):
    """A streaming chat completion with its engine prompt size and block keys."""
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    prompt = chat_template(messages)
    return BenchRequest(rid=rid, path="/v1/chat/completions", body=json.dumps(body).encode(),
                        prompt_tokens=engine_token_count(prompt), max_tokens=max_tokens,
                        block_keys=engine_block_keys(prompt), group=group, stage=stage)


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
        sessions.append(Session(t, [chat_request(rid, messages, scaled(p.output_tokens, k), group=group)]))
    return Workload(
        name="shared-prefix", title="Shared-prefix groups (SGLang generated-shared-prefix)",
        description=(f"{p.groups} groups x {p.prompts_per_group} prompts ({count} requests, {p.popularity} group "
                     f"popularity), each a {p.system_tokens}-token group system prompt + a {p.question_tokens}-token "
                     f"question, {p.output_tokens} output tokens; Poisson arrivals at {p.rate:g} req/s."),
        sessions=sessions, kv_capacity_tokens=scaled(p.kv_capacity_tokens, k), sim_args=scaled_sim_args(k),
        params=vars(p).copy())


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


def multi_turn(p, pods, seed):
    """Users in interleaved conversations: each turn sends the system prompt, the whole history and a new question.
    The assistant replies put into the history are synthetic text of answer_tokens tokens (the engine does not
    cache its own output, so only the previous prompts can hit, with real replies or these)."""
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
            requests.append(chat_request(rid, list(history), scaled(p.answer_tokens, k), group=user))
            history.append({"role": "assistant", "content": words(("mt-answer", seed, user, turn),
                                                                  scaled(p.answer_tokens, k))})
            rid += 1
        think = [rng.expovariate(1.0 / p.think_s) if p.think_s > 0 else 0.0 for _ in range(p.turns - 1)]
        sessions.append(Session(start, requests, think))
    return Workload(
        name="multi-turn", title="Multi-turn chat (every turn resends the conversation)",
        description=(f"{p.users} users x {p.turns} turns ({p.users * p.turns} requests); a {p.system_tokens}-token "
                     f"system prompt shared by all, a {p.context_tokens}-token document per user in the first turn, "
                     f"{p.question_tokens}-token questions, {p.answer_tokens}-token answers added to the history; "
                     f"users start at {p.user_rate:g}/s (Poisson) and pause {p.think_s:g} s (mean) between turns."),
        sessions=sessions, kv_capacity_tokens=scaled(p.kv_capacity_tokens, k), sim_args=scaled_sim_args(k),
        params=vars(p).copy())


# --- capacity-pressure ----------------------------------------------------------------------------------------
@dataclass
class CapacityPressureParams:
    groups: int = 150
    users_per_group: int = 5
    prefix_tokens: int = 6000
    question_tokens: int = 1200
    output_tokens: int = 1000
    working_set_fraction: float = 0.73   # all groups' prefixes / the whole fleet's KV capacity
    rates: str = "6,12,18,24,30,36"      # requests per simulated second, one stage each
    stage_s: float = 15.0                # simulated seconds per stage
    token_scale: float = 0.125


def capacity_pressure(p, pods, seed):
    """llm-d's capacity-pressure profile: every request is one of groups x users_per_group fixed prompts (group
    prefix + the user's question), drawn uniformly, Poisson arrivals at stepped rates. The per-pod KV capacity is
    set so that the groups' prefixes fill `working_set_fraction` of the fleet's cache."""
    k, rng = p.token_scale, random.Random(seed)
    prefix_tokens, question_tokens = scaled(p.prefix_tokens, k), scaled(p.question_tokens, k)
    kv_capacity = round(p.groups * prefix_tokens / p.working_set_fraction / pods)
    prefixes = [words(("cp-prefix", seed, g), prefix_tokens) for g in range(p.groups)]
    rates = [float(r) for r in str(p.rates).split(",") if r.strip()]
    sessions, rid, t0 = [], 0, 0.0
    for stage, rate in enumerate(rates):
        t = t0
        while True:
            t += rng.expovariate(rate)
            if t >= t0 + p.stage_s:
                break
            group, user = rng.randrange(p.groups), rng.randrange(p.users_per_group)
            messages = [{"role": "system", "content": prefixes[group]},
                        {"role": "user", "content": words(("cp-question", seed, group, user), question_tokens)}]
            sessions.append(Session(t, [chat_request(rid, messages, scaled(p.output_tokens, k), group=group,
                                                     stage=stage)]))
            rid += 1
        t0 += p.stage_s
    return Workload(
        name="capacity-pressure", title="Capacity pressure (llm-d's profile)",
        description=(f"{p.groups} groups x {p.prefix_tokens}-token shared prefix, {p.users_per_group} users per group "
                     f"with {p.question_tokens}-token questions, {p.output_tokens} output tokens; Poisson arrivals "
                     f"stepped through {', '.join(f'{r:g}' for r in rates)} req/s, {p.stage_s:g} s each "
                     f"({rid} requests). The groups' prefixes are {p.working_set_fraction:.0%} of the fleet's KV "
                     f"cache ({pods} pods x {kv_capacity} tokens at this token scale)."),
        sessions=sessions, kv_capacity_tokens=kv_capacity, sim_args=scaled_sim_args(k), params=vars(p).copy(),
        stages=[(r, p.stage_s) for r in rates])


PARAMS = {"shared-prefix": SharedPrefixParams, "multi-turn": MultiTurnParams,
          "capacity-pressure": CapacityPressureParams}
BUILDERS = {"shared-prefix": shared_prefix, "multi-turn": multi_turn, "capacity-pressure": capacity_pressure}


def apply_overrides(params, overrides):
    """Sets dataclass fields from {"name": "text"}, converting to each field's type; unknown names are errors."""
    types = {f.name: f.type for f in fields(params)}
    for name, text in overrides.items():
        if name not in types:
            raise ValueError(f"unknown parameter {name!r} (known: {', '.join(types)})")
        kind = types[name] if isinstance(types[name], type) else type(getattr(params, name))
        setattr(params, name, kind(text))
    return params
