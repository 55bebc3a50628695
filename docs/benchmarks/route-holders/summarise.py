#!/usr/bin/python3
"""Medians of the alternating rounds in this folder, or in the folder given as the argument (before-roundN.json /
after-roundN.json, Google Benchmark JSON): CPU microseconds per decision, every round listed. Benchmarks only one
side ran are listed after the table."""
import json
import statistics
import sys
from pathlib import Path

here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
rows = {}
for side in ("before", "after"):
    for path in sorted(here.glob(f"{side}-round*.json")):
        for b in json.loads(path.read_text())["benchmarks"]:
            scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
            rows.setdefault(b["name"], {}).setdefault(side, []).append(b["cpu_time"] * scale)
print("| decision | before (rounds) | after (rounds) | median before | median after | after / before |")
print("| --- | --- | --- | --- | --- | --- |")
for name, v in rows.items():
    if len(v) < 2:
        continue
    b, a = statistics.median(v["before"]), statistics.median(v["after"])
    fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
    print(f"| {name} | {fmt(v['before'])} | {fmt(v['after'])} | {b:.2f} | {a:.2f} | {a / b:.2f} |")
for name, v in rows.items():
    if len(v) < 2:
        for side, xs in v.items():
            print(f"{side} only: {name}: " + ", ".join(f"{x:.2f}" for x in xs) + f" (median {statistics.median(xs):.2f})")
