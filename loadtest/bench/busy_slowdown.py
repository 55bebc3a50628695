#!/usr/bin/env python3
"""How much slower than the calibration the real pods computed in a real-engine run, by how many pods were busy
(docs/benchmarks.md, issue 23: the simulator's contention table against what the runs themselves met).

Reads a real-engine benchmark's folder (real.py's calibration.json and records.jsonl.gz) and, for every answered
request of the llama fleet, divides llama-server's own prompt_ms by what the calibration's isolated fit predicts for
its (new, cached) tokens (calibrate.prefill_ms, the workload's own context coefficient), and files the ratio under
k = the pods of its run with a request in flight at the middle of its prompt's time (its own included). Medians per
workload, cold (at most COLD_CACHED_MAX cached) and warm apart, beside the contention probe's table(s): the one
taken before the runs and, where the run had it, the one of the rounds between each workload's runs (in_run).
Then, per fleet, the median TTFT and TTFT - prompt_ms of cold and warm requests (what llama-server spends before
computing a prompt, which its prompt_ms leaves out).

  /usr/bin/python3 loadtest/bench/busy_slowdown.py docs/benchmarks/real-engine-inrun [--out FILE.md]
"""
import argparse
import collections
import gzip
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import calibrate  # noqa: E402


def busy_at(run, t):
    """The pods of `run` (records of one run) with a request in flight at time t (send .. last byte)."""
    return {r["pod"] for r in run if r["send_s"] <= t <= r["send_s"] + r["e2e_s"]}


def slowdown_by_busy(cal, records, fleet="llama"):
    """{(workload, "cold" | "warm"): {k: [prompt_ms / predicted]}} over the answered requests of `fleet` with
    engine timings (records: real.py's record lines)."""
    runs = collections.defaultdict(list)
    for r in records:
        if r["fleet"] == fleet and r["status"] == 200 and r.get("timings") and r["ttft_s"] >= 0:
            runs[(r["workload"], r["strategy"], r["seed"], r["attempt"])].append(r)
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    for (workload, *_), run in runs.items():
        # A workload probed between its runs (its warm entry has "slices": real.py InRunProbe) had its context
        # coefficient fitted against the calibration slowed by the lone pod's factor: predict with that calibration
        # and the coefficient as fitted, then take the factor back out, so every ratio is against the calibration
        # as measured before the runs.
        in_run = (cal.get("in_run") or {}).get(workload)
        between = in_run and ((cal.get("warm") or {}).get(workload) or {}).get("slices")
        base = calibrate.with_in_run(cal, in_run) if between else cal
        undo = in_run["drift"]["prefill"] if between else 1.0
        fit = {**base["prefill"], "context_attention_ms_per_m_pairs": calibrate.context_attention(cal, workload)}
        for r in run:
            t = r["timings"]
            new, cached = t.get("prompt_n", 0), t.get("cache_n", 0)
            if new <= 0 or not t.get("prompt_ms"):
                continue
            k = len(busy_at(run, r["send_s"] + r["ttft_s"] / 2))
            kind = "cold" if cached <= calibrate.COLD_CACHED_MAX else "warm"
            out[(workload, kind)][k].append(t["prompt_ms"] * undo / calibrate.prefill_ms(fit, new, cached))
    return out


def render(cal, table):
    """A markdown table: per workload and kind, the median ratio (and count) at each k, and the probes' tables."""
    most = max([len((cal.get("contention_probe") or {}).get("prefill") or [])]
               + [max(by_k) for by_k in table.values() if by_k])
    head = ["workload", "prompts"] + [f"{k} busy" for k in range(1, most + 1)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def row(name, kind, cells):
        lines.append("| " + " | ".join([name, kind] + cells + [""] * (most - len(cells))) + " |")

    probe = (cal.get("contention_probe") or {}).get("prefill")
    if probe:
        row("(the probe before the runs)", "cold, alone = 1", [f"x{x:.2f}" for x in probe])
    for (workload, kind), by_k in sorted(table.items()):
        row(workload, kind, [f"x{statistics.median(by_k[k]):.2f} ({len(by_k[k])})" if by_k.get(k) else "-"
                             for k in range(1, most + 1)])
        in_run = (cal.get("in_run") or {}).get(workload)
        if in_run and kind == "warm":
            drift = in_run["drift"]["prefill"]
            row(workload, "probe between its runs, x lone pod", [f"x{x * drift:.2f}" for x in in_run["prefill"]])
    return "\n".join(lines) + "\n"


def before_prompt(records):
    """A markdown table: per workload, strategy and kind (cold / warm), each fleet's median TTFT and median TTFT -
    prompt_ms in ms (llama-server: what it spent before computing the prompt, client side included; a simulated pod
    reports its step's time as prompt_ms, so there it is the gateway and the client alone)."""
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in records:
        t = r.get("timings") or {}
        if r["status"] != 200 or not t.get("prompt_ms") or r["ttft_s"] < 0:
            continue
        kind = "cold" if r["cached_tokens"] <= calibrate.COLD_CACHED_MAX else "warm"
        ttft = 1000.0 * r["ttft_s"]
        rows[(r["workload"], r["strategy"], kind)][r["fleet"]].append((ttft, ttft - t["prompt_ms"]))
    fleets = sorted({f for by in rows.values() for f in by}, key=lambda f: (f != "llama", f))
    head = ["workload", "strategy", "prompts"] + [f"{f}: TTFT / TTFT - prompt_ms" for f in fleets]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for (workload, strategy, kind), by in sorted(rows.items()):
        cells = [f"{statistics.median(x for x, _ in by[f]):.0f} / {statistics.median(y for _, y in by[f]):.0f} ms"
                 if by.get(f) else "-" for f in fleets]
        lines.append("| " + " | ".join([workload, strategy, kind] + cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a real-engine benchmark's output (calibration.json, records.jsonl.gz)")
    ap.add_argument("--fleet", default="llama")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    cal = json.loads((folder / "calibration.json").read_text())
    with gzip.open(folder / "records.jsonl.gz", "rt") as f:
        records = [json.loads(line) for line in f]
    text = (f"{folder}: llama-server's prompt_ms over the calibration's isolated prediction, median (requests) by "
            f"the pods busy at the middle of its prompt\n\n" + render(cal, slowdown_by_busy(cal, records, args.fleet))
            + "\nMedian TTFT and TTFT - prompt_ms per fleet\n\n" + before_prompt(records))
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
