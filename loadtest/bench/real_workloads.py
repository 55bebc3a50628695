"""The routing-quality workloads for real engines (llama.cpp's llama-server) and for the simulated fleet that stands
in for them (loadtest/bench/real.py): the same seeded prompt TEXTS for both, so the two fleets are compared in
seconds on identical requests.

Unlike workloads.py nothing here predicts the engine: a real pod tokenizes with its own SentencePiece vocabulary and
generates text nobody can compute in advance. So a request carries no token counts or block keys (the bound is
computed after the run from the engine's own tokens: engine_bound.py), and a multi-turn conversation is built at
send time from the replies the engine actually streamed (Session.carry_replies, loadgen.py).

Text is ordinary English words (a fixed list of common words, seeded choices, sentences of 6-16 words), so a real
vocabulary tokenizes it as it would tokenize prose (about 4 bytes per token with the Llama vocabulary: measured
per run, see the report), while the simulator cuts it into 4-byte pieces.

Every workload runs closed loop (`concurrency` users, each sending its next session when the last one ends; no
arrival times), as the issue's measurement did: with one-thread pods sharing two cores an open-loop rate would
measure the machine, not the routing. A workload's `parallel`, `ctx` and `cache_ram_mib` say how its pods run
(llama-server `--parallel`, `-c` (the total context, split over the slots) and `--cache-ram`, -1 = llama-server's
default, an 8 GiB host prompt cache); the simulated fleet is given the equivalent (real.py, calibrate.py).
"""
import json
import random
from dataclasses import dataclass

from bench.model import BenchRequest, Session, Workload
from bench.workloads import apply_overrides  # noqa: F401  (re-exported: real.py applies --param with it)

MODEL = "llama-model"   # harness.LlamaServer's alias; the simulated pods serve the same name

# Common English words (no punctuation): seeded choices of them read as prose to a tokenizer.
WORDS = list(dict.fromkeys("""the of and to in is was for that with as on by at from his her they this be are or an
which had not but one all were their there been has have more who will would when we other some if into time only new about
after first also them can could these two may then do any like my now over such our man me even most made back
see way well because each just those people how too little state good very make world still own work life where
long part through much before between must under never same another while last might great old year off come
since against go came right used take three place small found part again home here thing give many water city
system around however both high during without number public people school every order point government public
small large next early young important few between group country problem hand general fact house case week
company within program question during community mind area light kind power change night money story night
example sense market interest report field river north south office level court door health person art war
history party result change morning reason research girl guy moment air teacher force education foot boy age
policy music process center form land table book news color plan voice care model energy record data cache
server request prefix engine token answer travel garden winter summer bridge forest letter window doctor""".split()))
SENTENCE_WORDS = (6, 16)


def english(seed, count):
    """`count` words of seeded prose: the same seed (any str/int/tuple) gives the same text."""
    if count <= 0:
        return ""
    rng = random.Random(repr(seed))
    out, left = [], 0
    for i in range(count):
        word = rng.choice(WORDS)
        if left == 0:
            word = word.capitalize()
            left = rng.randint(*SENTENCE_WORDS)
        left -= 1
        out.append(word + ("." if left == 0 or i == count - 1 else ""))
    return " ".join(out)


def stream_body(messages, max_tokens, model=MODEL):
    """The fields of a streamed chat completion with usage (cached tokens) in its last chunk."""
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}


def fixed_request(rid, messages, max_tokens, group, model=MODEL):
    """A request whose body is known in advance (token counts and keys unknown: the engine tokenizes)."""
    body = json.dumps(stream_body(messages, max_tokens, model)).encode()
    return BenchRequest(rid=rid, path="/v1/chat/completions", body=body, prompt_tokens=0, max_tokens=max_tokens,
                        block_keys=[], group=group)


def turn_request(rid, new_messages, max_tokens, group, model=MODEL):
    """A conversation turn built at send time from the history (Session.carry_replies)."""
    fields = stream_body([], max_tokens, model)
    del fields["messages"]
    return BenchRequest(rid=rid, path="/v1/chat/completions", body=b"", prompt_tokens=0, max_tokens=max_tokens,
                        block_keys=[], group=group, new_messages=list(new_messages), body_fields=fields)


@dataclass
class FleetParams:
    """How each pod runs (the llama-server flags; calibrate.sim_flags maps them onto the simulator)."""
    parallel: int = 2          # --parallel: slots, requests served at once
    ctx: int = 8192            # -c: the total context, ctx / parallel per slot
    cache_ram_mib: int = -1    # --cache-ram: -1 = llama-server's default (8 GiB host prompt cache), 0 = none


@dataclass
class SharedPrefixParams(FleetParams):
    groups: int = 8
    prompts_per_group: int = 12
    system_words: int = 1400   # about 1,550 Llama tokens (5.1 bytes per token on this prose)
    question_words: int = 40
    output_tokens: int = 16
    concurrency: int = 4


@dataclass
class SharedPrefixKvParams(SharedPrefixParams):
    ctx: int = 4096            # 2 slots of 2,048 tokens: one prompt each, nothing more
    cache_ram_mib: int = 0     # no host prompt cache: a pod holds its 2 slots' prompts only


@dataclass
class MultiTurnParams(FleetParams):
    users: int = 16
    turns: int = 6
    system_words: int = 400    # shared by every user (about 550 Llama tokens)
    context_words: int = 600   # the user's own document, in the first turn (about 800 tokens)
    question_words: int = 30
    output_tokens: int = 16
    think_s: float = 0.0       # pause between a reply and the next turn (closed loop: the user waits anyway)
    concurrency: int = 4


@dataclass
class MultiTurnKvParams(MultiTurnParams):
    ctx: int = 4096
    cache_ram_mib: int = 0


def _fleet_note(p):
    cache = {-1: "llama-server's default host prompt cache (8 GiB)", 0: "no host prompt cache (`--cache-ram 0`)"}
    return (f"Each pod: `--parallel {p.parallel} -c {p.ctx}` ({p.parallel} slots of {p.ctx // p.parallel} tokens), "
            f"{cache.get(p.cache_ram_mib, f'a {p.cache_ram_mib} MiB host prompt cache')}.")


def _shared_prefix(p, seed, name, title):
    rng = random.Random(seed)
    picks = [g for g in range(p.groups) for _ in range(p.prompts_per_group)]
    rng.shuffle(picks)
    systems = [english(("real-sp-system", seed, g), p.system_words) for g in range(p.groups)]
    sessions = []
    for rid, group in enumerate(picks):
        messages = [{"role": "system", "content": systems[group]},
                    {"role": "user", "content": english(("real-sp-question", seed, rid), p.question_words)}]
        sessions.append(Session(0.0, [fixed_request(rid, messages, p.output_tokens, group)]))
    return Workload(
        name=name, title=title,
        description=(f"{p.groups} groups x {p.prompts_per_group} prompts ({len(sessions)} streamed requests, "
                     f"shuffled), each a {p.system_words}-word group system prompt + a {p.question_words}-word "
                     f"question, {p.output_tokens} output tokens; closed loop, {p.concurrency} concurrent users. "
                     + _fleet_note(p)),
        sessions=sessions, mode="closed", concurrency=p.concurrency, params=vars(p).copy(), time_scale=1.0,
        seed_note="each seed draws its own texts and order")


def shared_prefix(p, seed):
    """SGLang's generated-shared-prefix at the issue's size: 8 groups x ~1,550-token system prompts, 96 requests."""
    return _shared_prefix(p, seed, "shared-prefix", "Shared-prefix groups")


def shared_prefix_kv(p, seed):
    """The same under KV pressure: each pod keeps only its slots' prompts (small context, no host prompt cache)."""
    return _shared_prefix(p, seed, "shared-prefix-kv", "Shared-prefix groups under KV pressure")


def _multi_turn(p, seed, name, title):
    rng = random.Random(seed)
    system = english(("real-mt-system", seed), p.system_words)
    sessions, rid = [], 0
    for user in range(p.users):
        requests = []
        for turn in range(p.turns):
            question = english(("real-mt-question", seed, user, turn), p.question_words)
            new = [{"role": "user", "content": question}]
            if turn == 0:
                document = english(("real-mt-context", seed, user), p.context_words)
                new = [{"role": "system", "content": system}, {"role": "user", "content": document + "\n\n" + question}]
            requests.append(turn_request(rid, new, p.output_tokens, group=user))
            rid += 1
        think = [rng.expovariate(1.0 / p.think_s) if p.think_s > 0 else 0.0 for _ in range(p.turns - 1)]
        sessions.append(Session(0.0, requests, think, carry_replies=True))
    return Workload(
        name=name, title=title,
        description=(f"{p.users} users x {p.turns} turns ({p.users * p.turns} streamed requests); a "
                     f"{p.system_words}-word system prompt shared by all, a {p.context_words}-word document per user "
                     f"in the first turn, {p.question_words}-word questions, {p.output_tokens}-token answers; each "
                     f"turn resends the conversation with the replies the engine actually streamed; closed loop, "
                     f"{p.concurrency} concurrent users (a user's turns back to back). " + _fleet_note(p)),
        sessions=sessions, mode="closed", concurrency=p.concurrency, params=vars(p).copy(), time_scale=1.0,
        seed_note="each seed draws its own texts")


def multi_turn(p, seed):
    """Chat users whose every turn resends the conversation, with the engine's own replies."""
    return _multi_turn(p, seed, "multi-turn", "Multi-turn chat")


def multi_turn_kv(p, seed):
    """Multi-turn chat under KV pressure (small context, no host prompt cache)."""
    return _multi_turn(p, seed, "multi-turn-kv", "Multi-turn chat under KV pressure")


PARAMS = {"shared-prefix": SharedPrefixParams, "multi-turn": MultiTurnParams, "shared-prefix-kv": SharedPrefixKvParams,
          "multi-turn-kv": MultiTurnKvParams}
BUILDERS = {"shared-prefix": shared_prefix, "multi-turn": multi_turn, "shared-prefix-kv": shared_prefix_kv,
            "multi-turn-kv": multi_turn_kv}
DEFAULT = "shared-prefix,multi-turn,shared-prefix-kv"


def build(name, overrides, seed):
    """The workload `name` with its parameters overridden ({"name": "text"}) for `seed`."""
    return BUILDERS[name](apply_overrides(PARAMS[name](), overrides), seed)
