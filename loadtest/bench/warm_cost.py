#!/usr/bin/python3
"""What a warm prompt (new tokens after a cached prefix) costs llama-server on this machine, alone: the measurement
behind the simulator's --context-attention-ms-per-m-pairs (docs/simulator.md, "Pairs against a cached prefix").

One llama-server (`-t 1 --parallel 2 -c 8192`, the benchmark's pod) alone; llama-server's own prompt_ms of each
answer. Two series, each a system prompt (the cached prefix, sent once cold first) and then questions one at a
time, each question a fresh user message after the same system prompt (the shared-prefix workload's shape):
- by prefix: system prompts of 150 to 2,000 words, six 40-word questions each (median prompt_ms);
- by question: 600- and 2,000-word system prompts, questions of 10 to 300 words, five each.

  /usr/bin/python3 loadtest/bench/warm_cost.py [--out FILE.json]
"""
import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2] / "tests")]

from bench.calibrate import _stream  # noqa: E402
from bench.real_workloads import english  # noqa: E402
from harness import LlamaServer  # noqa: E402

PREFIX_WORDS = (150, 600, 1100, 2000)
QUESTION_WORDS = (10, 40, 150, 300)


def ask(pod, system, question, max_tokens=16):
    _, t, _ = _stream(pod, [{"role": "system", "content": system}, {"role": "user", "content": question}], max_tokens)
    return t["prompt_n"], t["cache_n"], t["prompt_ms"]


def series(pod, tag, prefix_words, question_words, count, seed):
    # A system prompt of the series' own (no earlier series left it in llama-server's host prompt cache): cold first.
    system = english(("warm-cost-system", seed, tag, prefix_words, question_words), prefix_words)
    cold = ask(pod, system, "hello")
    rows = [ask(pod, system, english(("warm-cost-q", seed, tag, prefix_words, question_words, i),
                                         question_words))
            for i in range(count)]
    return {"prefix_words": prefix_words, "question_words": question_words, "cold": cold, "warm": rows,
            "new": statistics.median(r[0] for r in rows), "cached": statistics.median(r[1] for r in rows),
            "median_ms": statistics.median(r[2] for r in rows), "min_ms": min(r[2] for r in rows),
            "max_ms": max(r[2] for r in rows)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="write the samples as JSON here")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="warm-cost-") as tmp:
        pod = LlamaServer(tmp, name="warm-cost", parallel=2, ctx=8192, threads=1)
        try:
            by_prefix = [series(pod, "prefix", words, 40, 6, args.seed) for words in PREFIX_WORDS]
            by_question = [series(pod, "question", words, q, 5, args.seed)
                           for words in (600, 2000) for q in QUESTION_WORDS]
        finally:
            pod.stop()
    print("| system words | question words | new tokens | cached tokens | prompt_ms median (min-max) |")
    print("| --- | --- | --- | --- | --- |")
    for row in by_prefix + by_question:
        print(f"| {row['prefix_words']} | {row['question_words']} | {row['new']:.0f} | {row['cached']:.0f} | "
              f"{row['median_ms']:.1f} ({row['min_ms']:.0f}-{row['max_ms']:.0f}) |")
    if args.out:
        Path(args.out).write_text(json.dumps({"by_prefix": by_prefix, "by_question": by_question}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
