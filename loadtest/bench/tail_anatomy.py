#!/usr/bin/env python3
"""What the slowest requests of a real-engine run were waiting for (docs/benchmarks.md, issue 23's TTFT p90).

Reads a real-engine benchmark's records (real.py's records.jsonl.gz) and, per run of one workload with groups
(shared-prefix, shared-prefix-kv), sorts the requests at or above the run's TTFT p90 into:
- first:    its group's first request of the run: a cold prefill that every router pays;
- waiter:   sent while its group's first request had no first token yet: it waits for that prefill (held by the
            gateway, or queued on the pod) or pays a cold prefill elsewhere;
- cold:     another cold prefill (fewer than COLD_CACHED cached tokens): a group's prefix computed again;
- blocked:  warm, but a cold prefill of another group ran on its pod while it waited (llama-server computes a
            prompt batch in one call, new requests start after it);
- warm:     none of these (a warm request slowed by the machine's other work).

  /usr/bin/python3 loadtest/bench/tail_anatomy.py docs/benchmarks/real-engine-warm/records.jsonl.gz \
      [--workload shared-prefix] [--fleet llama]
"""
import argparse
import collections
import gzip
import json
import statistics
import sys

COLD_CACHED = 100
KINDS = ("first", "waiter", "cold", "blocked", "warm")


def p90(values):
    """The 90th percentile as the benchmark reports it (statistics.quantiles, exclusive method)."""
    return statistics.quantiles(sorted(values), n=10)[-1]


def classify(records):
    """records of one run (dicts: rid, group, pod, send_s, ttft_s, cached_tokens, timings) -> {rid: kind} of the
    requests at or above the run's TTFT p90."""
    recs = sorted(records, key=lambda r: (r["send_s"], r["rid"]))
    first = {}
    for r in recs:
        first.setdefault(r["group"], r)
    cut = p90([r["ttft_s"] for r in recs])
    out = {}
    for r in recs:
        if r["ttft_s"] < cut:
            continue
        head = first[r["group"]]
        wait_end = r["send_s"] + r["ttft_s"] - ((r.get("timings") or {}).get("prompt_ms") or 0.0) / 1000.0
        if head is r:
            kind = "first"
        elif head["send_s"] <= r["send_s"] < head["send_s"] + head["ttft_s"]:
            kind = "waiter"
        elif r["cached_tokens"] < COLD_CACHED:
            kind = "cold"
        elif any(o is not r and o["pod"] == r["pod"] and o["cached_tokens"] < COLD_CACHED
                 and o["send_s"] < wait_end and o["send_s"] + o["ttft_s"] > r["send_s"] for o in recs):
            kind = "blocked"
        else:
            kind = "warm"
        out[r["rid"]] = kind
    return out


def runs_of(path, workload, fleet):
    runs = collections.defaultdict(list)
    with gzip.open(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            if r["workload"] == workload and r["fleet"] == fleet and r["status"] == 200:
                runs[(r["strategy"], r["seed"], r["attempt"])].append(r)
    return runs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records")
    ap.add_argument("--workload", default="shared-prefix")
    ap.add_argument("--fleet", default="llama")
    args = ap.parse_args(argv)
    runs = runs_of(args.records, args.workload, args.fleet)
    if not runs:
        raise SystemExit(f"no {args.workload} runs of fleet {args.fleet} in {args.records}")
    print(f"{args.workload}, fleet {args.fleet}: the requests at or above each run's TTFT p90\n")
    print("| strategy | seed | p90 s | at or above | " + " | ".join(KINDS) + " |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in KINDS) + " |")
    totals = collections.defaultdict(collections.Counter)
    for (strategy, seed, attempt), recs in sorted(runs.items()):
        kinds = collections.Counter(classify(recs).values())
        totals[strategy].update(kinds)
        cut = p90([r["ttft_s"] for r in recs])
        print(f"| {strategy} | {seed}{'' if attempt == 0 else f' (attempt {attempt})'} | {cut:.3f} | "
              f"{sum(kinds.values())} | " + " | ".join(str(kinds[k]) for k in KINDS) + " |")
    for strategy, kinds in sorted(totals.items()):
        print(f"| {strategy} | all | | {sum(kinds.values())} | " + " | ".join(str(kinds[k]) for k in KINDS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
