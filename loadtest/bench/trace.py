"""Mooncake-format trace replay, and the small synthetic sample trace committed next to it.

A Mooncake (FAST'25) trace is JSONL, one request per line: `timestamp` (ms since the trace start),
`input_length` and `output_length` (tokens) and `hash_ids`, one id per 512-token block of the prompt (the last
block may be partial). Equal ids mean equal blocks, so the replayer gives every id its own 512 seeded 4-byte words
and builds each prompt by concatenating its blocks, cut to input_length: two requests whose hash_ids share a
prefix share exactly that prefix of engine tokens. Prompts go to /v1/completions as plain text, so the engine's
prompt_tokens equals input_length exactly (times the token scale).

`python3 loadtest/bench/trace.py --write-sample FILE` regenerates the sample (seeded; not a real trace).
"""
import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.model import BenchRequest, Session, Workload  # noqa: E402
from bench.textgen import cached_sequence, engine_block_keys, predicted_reply, text_tokens, words  # noqa: E402
from bench.workloads import MODEL, SIM_KV_CAPACITY_TOKENS, scaled, scaled_sim_args  # noqa: E402

MOONCAKE_BLOCK_TOKENS = 512
SAMPLE_TRACE = Path(__file__).resolve().parent / "traces" / "sample_mooncake.jsonl"


@dataclass
class TraceParams:
    file: str = str(SAMPLE_TRACE)
    speedup: float = 1.0             # timestamps are divided by this
    limit: int = 0                   # replay only the first N lines (0 = all)
    token_scale: float = 0.25
    kv_capacity_tokens: int = SIM_KV_CAPACITY_TOKENS
    time_scale: float = 0.5          # simulator speed: wall seconds per simulated second


def read_trace(path, limit=0):
    """The trace's lines as dicts, checked for the four Mooncake fields."""
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            missing = {"timestamp", "input_length", "output_length", "hash_ids"} - row.keys()
            if missing:
                raise ValueError(f"{path}:{number}: missing {', '.join(sorted(missing))}")
            rows.append(row)
            if limit and len(rows) >= limit:
                break
    return rows


def prompt_text(hash_ids, input_length, block_tokens, seed=0):
    """Prompt text of exactly input_length tokens: block i is the first tokens of hash_ids[i]'s own words (drawn
    with `seed`: each seed gets other texts with the same sharing structure)."""
    parts, left = [], input_length
    for hash_id in hash_ids:
        if left <= 0:
            break
        take = min(block_tokens, left)
        parts.append(words(("mooncake-block", seed, hash_id), block_tokens)[:take * 4])
        left -= take
    if left > 0:  # fewer ids than the length needs: fill with words unique to this request's ids
        parts.append(words(("mooncake-tail", seed, tuple(hash_ids), input_length), left))
    return "".join(parts)


def trace_workload(p, pods, seed):
    """Replays a Mooncake trace, open loop at its own timestamps / speedup."""
    k = p.token_scale
    block_tokens = scaled(MOONCAKE_BLOCK_TOKENS, k)
    rows = read_trace(p.file, p.limit)
    sessions = []
    for rid, row in enumerate(rows):
        text = prompt_text(row["hash_ids"], scaled(row["input_length"], k), block_tokens, seed)
        max_tokens = scaled(row["output_length"], k)
        body = {"model": MODEL, "prompt": text, "max_tokens": max_tokens, "stream": True,
                "stream_options": {"include_usage": True}}
        chain = row["hash_ids"][0] if row["hash_ids"] else -1
        tokens = text_tokens(text)
        at = row["timestamp"] / 1000.0 / p.speedup
        reply = text_tokens(predicted_reply(tokens, max_tokens))
        req = BenchRequest(rid=rid, path="/v1/completions", body=json.dumps(body).encode(),
                           prompt_tokens=len(tokens), max_tokens=max_tokens, block_keys=engine_block_keys(tokens),
                           cache_keys=engine_block_keys(cached_sequence(tokens, reply)), group=chain, at_s=at)
        sessions.append(Session(at, [req]))
    span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000.0 / p.speedup if rows else 0.0
    return Workload(
        name="trace", title=f"Mooncake trace replay ({Path(p.file).name})",
        description=(f"{len(rows)} requests from `{Path(p.file).name}` replayed at their timestamps"
                     f"{f' / {p.speedup:g}' if p.speedup != 1 else ''} ({span:.0f} s); hash_ids of "
                     f"{MOONCAKE_BLOCK_TOKENS}-token blocks become equal token blocks; /v1/completions."),
        seed_note="each seed draws its own texts; the arrivals and the sharing structure are the trace's",
        sessions=sessions, kv_capacity_tokens=scaled(p.kv_capacity_tokens, k), sim_args=scaled_sim_args(k),
        params=vars(p).copy() | {"file": Path(p.file).name}, time_scale=p.time_scale)


def make_sample(seed=4, requests=240, rate=8.0):
    """A small synthetic trace in the Mooncake format, shaped like the toolagent trace: a few shared tool/system
    prefixes, sessions that grow turn by turn (each resends its previous blocks plus new ones), and one-off
    requests. Not a real trace: it exists so the replayer can run without downloading anything."""
    rng = random.Random(seed)
    next_id = [0]

    def fresh(n):
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    system_prefixes = [fresh(rng.randint(2, 4)) for _ in range(6)]
    open_sessions, rows, t = [], [], 0.0
    for _ in range(requests):
        t += rng.expovariate(rate)
        roll = rng.random()
        if open_sessions and roll < 0.55:           # next turn of a running session
            session = rng.choice(open_sessions)
            session["ids"] += fresh(rng.randint(1, 2))
            if len(session["ids"]) > 14 or rng.random() < 0.15:
                open_sessions.remove(session)
            ids = list(session["ids"])
        elif roll < 0.85:                           # a new session on a shared system/tool prefix
            ids = rng.choice(system_prefixes) + fresh(rng.randint(1, 3))
            open_sessions.append({"ids": list(ids)})
        else:                                       # a one-off request
            ids = fresh(rng.randint(1, 6))
        input_length = (len(ids) - 1) * MOONCAKE_BLOCK_TOKENS + rng.randint(64, MOONCAKE_BLOCK_TOKENS)
        rows.append({"timestamp": int(t * 1000), "input_length": input_length,
                     "output_length": rng.randint(16, 400), "hash_ids": ids})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-sample", metavar="FILE", help="write the synthetic sample trace to FILE")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--rate", type=float, default=8.0, help="mean requests per second of the sample")
    args = ap.parse_args()
    if not args.write_sample:
        ap.print_help()
        return 2
    rows = make_sample(args.seed, args.requests, args.rate)
    Path(args.write_sample).parent.mkdir(parents=True, exist_ok=True)
    with open(args.write_sample, "w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    print(f"wrote {len(rows)} requests to {args.write_sample}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
