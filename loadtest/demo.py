#!/usr/bin/env python3
"""The main job in one command: simulated engine pods, the gateway in front of them, a short shared-prefix
workload through it, once per strategy, and what happened (requests, the pod that served each, cache hits).

Run by scripts/demo.sh (which builds first). Uses only Debian's /usr/bin/python3 and python3-yaml.
"""
import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Gateway, Sim  # noqa: E402

WORDS = ("policy section clause router cache engine token prefix model request latency budget shard replica "
         "document summary answer question context window").split()


def system_prompt(group, words):
    rng = random.Random(group)
    return f"[group {group}] You are assistant #{group}. Use this document: " + " ".join(rng.choice(WORDS) for _ in range(words))


def workload(groups, per_group, words, seed):
    rng = random.Random(seed)
    items = [(g, q) for g in range(groups) for q in range(per_group)]
    rng.shuffle(items)
    return [(g, [{"role": "system", "content": system_prompt(g, words)},
                 {"role": "user", "content": f"Question {q} for group {g}: what does section {q} say?"}]) for g, q in items]


def run(strategy, requests, pods, concurrency, tmp, time_scale, verbose):
    sims = [Sim(tmp, f"{strategy}-engine-{i}", "--kv-capacity-tokens", "200000", time_scale=time_scale)
            for i in range(pods)]
    gw = Gateway(tmp, sims, config={"routing": {"strategy": strategy}, "threads": 2}, name=f"gateway-{strategy}")
    results, lock, queue = [], threading.Lock(), list(enumerate(requests))

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                i, (group, messages) = queue.pop(0)
            started = time.monotonic()
            status, headers, body = gw.call("POST", "/v1/chat/completions",
                                            json.dumps({"model": "sim-model", "messages": messages, "max_tokens": 8}))
            usage = json.loads(body).get("usage", {}) if status == 200 else {}
            with lock:
                results.append({"i": i, "group": group, "status": status, "pod": headers.get("target-pod", "-"),
                                "match": headers.get("x-prefix-match-percent", "-"),
                                "prompt": usage.get("prompt_tokens", 0),
                                "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                                "seconds": time.monotonic() - started})

    try:
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gw.stop()
        for s in sims:
            s.stop()
    results.sort(key=lambda r: r["i"])
    if verbose:
        print(f"\n{strategy}: request by request (group -> pod, gateway's prefix match %, engine's cached tokens)")
        for r in results:
            print(f"  #{r['i']:<3} group {r['group']:<2} -> {r['pod']:<26} match {r['match']:>3}%  "
                  f"cached {r['cached']:>5}/{r['prompt']:<5} status {r['status']}  {r['seconds'] * 1000:6.1f} ms")
    return results


def summarize(strategy, results):
    ok = [r for r in results if r["status"] == 200]
    prompt = sum(r["prompt"] for r in ok)
    cached = sum(r["cached"] for r in ok)
    lat = sorted(r["seconds"] for r in ok)
    pods = Counter(r["pod"].rsplit("-", 1)[-1] for r in ok)
    groups_per_pod = {}
    for r in ok:
        groups_per_pod.setdefault(r["pod"], set()).add(r["group"])
    return {"strategy": strategy, "ok": len(ok), "errors": len(results) - len(ok),
            "hit": cached / prompt if prompt else 0.0, "p50": lat[len(lat) // 2] if lat else 0,
            "p90": lat[int(len(lat) * 0.9)] if lat else 0, "pods": dict(sorted(pods.items()))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategies", default="random,least-request,prefix-cache")
    ap.add_argument("--pods", type=int, default=4)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--per-group", type=int, default=6)
    ap.add_argument("--prompt-words", type=int, default=1500, help="words of each group's shared system prompt")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--time-scale", default="0.2", help="engine simulator speed (1 = real time)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--quiet", action="store_true", help="only the summary")
    args = ap.parse_args()
    requests = workload(args.groups, args.per_group, args.prompt_words, args.seed)
    print(f"prefixgate demo: {args.pods} simulated engine pods, {len(requests)} chat requests in {args.groups} groups "
          f"sharing a ~{args.prompt_words}-word system prompt, {args.concurrency} at a time")
    summaries = []
    with tempfile.TemporaryDirectory(prefix="prefixgate-demo-") as tmp:
        for strategy in args.strategies.split(","):
            results = run(strategy, requests, args.pods, args.concurrency, tmp, args.time_scale,
                          verbose=not args.quiet and strategy == args.strategies.split(",")[-1])
            summaries.append(summarize(strategy, results))
    print("\nsummary (same workload, fresh engines for each strategy)")
    print(f"  {'strategy':<15} {'ok':>4} {'errors':>6} {'cache hit':>9} {'p50 ms':>8} {'p90 ms':>8}  requests per pod")
    for s in summaries:
        print(f"  {s['strategy']:<15} {s['ok']:>4} {s['errors']:>6} {s['hit'] * 100:>8.1f}% {s['p50'] * 1000:>8.1f} "
              f"{s['p90'] * 1000:>8.1f}  {s['pods']}")
    return 0 if all(s["errors"] == 0 for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
