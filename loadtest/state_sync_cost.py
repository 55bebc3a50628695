#!/usr/bin/python3
"""What replica state sync costs, measured on the real path: a redis-server, two prefixgate replicas (A routes, B
only listens) and simulated pods on loopback.

1. Bytes per routed request: conversations (each turn resends the conversation so far plus a new question, as chat
   clients do) and a hot prompt resent many times, sent through replica A; A's and B's
   prefixgate_state_sync_bytes_total and records_total over the requests.
2. Redis memory for --blocks blocks (default 200,000): distinct prompts routed through A until the snapshot
   holds that many blocks, for short and long prompts; Redis's MEMORY USAGE of the snapshot and the stream and its
   used_memory, per block.

Usage: /usr/bin/python3 loadtest/state_sync_cost.py [--blocks N] [--seed S] [--out FILE.json]
Prints a Markdown table (and writes the raw figures as JSON with the git commit when --out is given)."""
import argparse
import concurrent.futures
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.replicas import counter_sum, histogram_buckets, histogram_quantile  # noqa: E402
from harness import Gateway, RedisServer, Sim, wait_until  # noqa: E402
from provenance import collect, gateway_binary, git_info  # noqa: E402

SYNC = "prefixgate_state_sync"


def counter(gw, name, **labels):
    return counter_sum([gw.metrics_text()], name, **labels) or 0.0


def lag_p99_ms(gw):
    buckets = histogram_buckets([gw.metrics_text()], f"{SYNC}_lag_seconds")
    return None if not buckets else histogram_quantile(buckets, 0.99) * 1000


def send_all(gw, contents, workers=8):
    def one(content):
        status, _, raw = gw.chat(content, max_tokens=2)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {raw[:200]!r}")
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, contents))


def words(rng, n):
    return " ".join(f"w{rng.randrange(100000)}" for _ in range(n))


def varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def snapshot_blocks(redis, key):
    """(members, blocks) of the snapshot: each member is model, pod, block count, hashes (sync/record_batch.h)."""
    members = redis.command("ZRANGE", key, "0", "-1")
    blocks = 0
    for m in members:
        m = m if isinstance(m, bytes) else m.encode("latin-1")
        n, at = varint(m, 0)
        at += n
        n, at = varint(m, at)
        at += n
        count, _ = varint(m, at)
        blocks += count
    return len(members), blocks


def settle(a, b):
    """Waits until B has applied every record A sent (their counters agree)."""
    wait_until(lambda: counter(b, f"{SYNC}_records_total", direction="received")
               >= counter(a, f"{SYNC}_records_total", direction="sent"), timeout=30, what="B caught up")


def bytes_per_request(a, b, contents):
    before = {k: counter(g, f"{SYNC}_bytes_total", direction=d) for k, g, d in
              (("a_sent", a, "sent"), ("b_received", b, "received"))}
    records = counter(a, f"{SYNC}_records_total", direction="sent")
    send_all(a, contents)
    time.sleep(0.6)  # the snapshot's next update (500 ms) is part of the cost
    settle(a, b)
    return {"requests": len(contents), "b_lag_p99_ms_so_far": lag_p99_ms(b),
            "records_sent": counter(a, f"{SYNC}_records_total", direction="sent") - records,
            "a_sent_bytes_per_request": (counter(a, f"{SYNC}_bytes_total", direction="sent") - before["a_sent"]) / len(contents),
            "b_received_bytes_per_request": (counter(b, f"{SYNC}_bytes_total", direction="received") - before["b_received"]) / len(contents)}


def conversations(rng, families, turns, question_words):
    """Every turn of `families` conversations, turn by turn (a client resends the conversation so far)."""
    convs = [words(rng, 200) for _ in range(families)]  # a system prompt each
    out = []
    for _ in range(turns):
        for i in range(families):
            convs[i] += " Q: " + words(rng, question_words) + " A: " + words(rng, 30)
            out.append(convs[i])
    return out


def memory_for(tmp, redis, sims, rng, target_blocks, prompt_words):
    redis.command("FLUSHALL")
    a = Gateway(tmp, sims, name=f"fill-{prompt_words}", config={
        "routing": {"strategy": "prefix-cache"}, "log_level": "warn",
        "state_sync": {"enabled": True, "redis": redis.url, "snapshot_interval_ms": 100}})
    try:
        baseline = redis.used_memory()
        sent = 0
        while True:
            batch = [words(rng, prompt_words) for _ in range(400)]
            send_all(a, batch)
            sent += len(batch)
            time.sleep(0.3)
            members, blocks = snapshot_blocks(redis, "prefixgate:snapshot")
            if blocks >= target_blocks or sent > 200000:
                break
        snapshot_bytes = redis.command("MEMORY", "USAGE", "prefixgate:snapshot", "SAMPLES", "0")
        stream_bytes = redis.command("MEMORY", "USAGE", "prefixgate:records", "SAMPLES", "0")
        stream_len = redis.command("XLEN", "prefixgate:records")
        used = redis.used_memory() - baseline
        return {"prompt_words": prompt_words, "requests": sent, "snapshot_records": members,
                "snapshot_blocks": blocks, "blocks_per_record": blocks / max(1, members),
                "snapshot_bytes": snapshot_bytes, "snapshot_bytes_per_block": snapshot_bytes / max(1, blocks),
                "stream_entries": stream_len, "stream_bytes": stream_bytes, "used_memory_growth": used}
    finally:
        a.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=200000, help="snapshot blocks to fill for the memory figure")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the raw figures here as JSON")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="state-sync-cost-"))
    redis = RedisServer(tmp)
    sims = [Sim(tmp, f"engine-{i}", "--log-level", "warn", time_scale="0.001") for i in range(4)]
    git = git_info()
    results = {"seed": args.seed, "blocks": args.blocks}
    try:
        config = {"routing": {"strategy": "prefix-cache"}, "log_level": "warn",
                  "state_sync": {"enabled": True, "redis": redis.url}}
        a = Gateway(tmp, sims, name="replica-a", config=config)
        b = Gateway(tmp, sims, name="replica-b", config=config)
        try:
            results["conversation"] = bytes_per_request(a, b, conversations(rng, 32, 8, 40))
            hot = words(rng, 400)
            results["hot_prompt"] = bytes_per_request(a, b, [hot] * 2000)
            results["distinct_2k"] = bytes_per_request(a, b, [words(rng, 300) for _ in range(1000)])
        finally:
            a.stop()
            b.stop()
        results["memory_short"] = memory_for(tmp, redis, sims, rng, args.blocks, 300)
        results["memory_long"] = memory_for(tmp, redis, sims, rng, args.blocks, 2400)
    finally:
        for s in sims:
            s.stop()
        redis.stop()
    print("| traffic through replica A | requests | records sent | bytes A sent / request | bytes B received / request "
          "| B's sync lag p99 so far (ms) |")
    print("|---|---|---|---|---|---|")
    for key, label in (("conversation", "32 conversations x 8 turns (each resends the conversation)"),
                       ("hot_prompt", "one ~2.4 KB prompt resent 2,000 times"),
                       ("distinct_2k", "1,000 distinct ~2 KB prompts")):
        r = results[key]
        print(f"| {label} | {r['requests']} | {r['records_sent']:.0f} | {r['a_sent_bytes_per_request']:.0f} | "
              f"{r['b_received_bytes_per_request']:.0f} | {r['b_lag_p99_ms_so_far']:.1f} |")
    print()
    print("| prompts | requests | snapshot records | blocks | blocks/record | snapshot bytes | bytes/block | "
          "stream entries | stream bytes | used_memory growth |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in ("memory_short", "memory_long"):
        r = results[key]
        print(f"| ~{r['prompt_words'] * 7 // 1000} KB | {r['requests']} | {r['snapshot_records']} | {r['snapshot_blocks']} | "
              f"{r['blocks_per_record']:.0f} | {r['snapshot_bytes']} | {r['snapshot_bytes_per_block']:.1f} | "
              f"{r['stream_entries']} | {r['stream_bytes']} | {r['used_memory_growth']} |")
    results["provenance"] = collect(" ".join(sys.argv), {"prefixgate": gateway_binary()}, git=git)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
