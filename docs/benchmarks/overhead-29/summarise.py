#!/usr/bin/python3
"""The proxy-overhead runs in this folder side by side (overhead.json of each: loops-1 and loops-2 on the binary
before util::tuneAllocator, after-loops-1 and after-loops-2 on the binary with it): per phase and run, prefix-cache's
and random's requests/s as a share of nginx's in the same run (median of the per-round ratios' run, min-max), and
each target's CPU microseconds per request (medians). Usage: summarise.py [folder]."""
import json
import sys
from pathlib import Path

here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
RUNS = ["loops-1", "after-loops-1", "loops-2", "after-loops-2"]
PHASES = {"throughput": "2 KiB, one body, 32 conn.", "families": "2 KiB families, 32 conn.",
          "long-prompt": "256 KiB families, 16 conn."}
TARGETS = ["nginx", "haproxy", "prefixgate-random", "prefixgate-prefix-cache"]

runs = {name: json.loads((here / name / "overhead.json").read_text()) for name in RUNS
        if (here / name / "overhead.json").exists()}
print("| phase | run | prefix-cache / nginx | random / nginx | HAProxy / nginx | CPU us/request: nginx, HAProxy, "
      "random, prefix-cache | prefix-cache p99 ms (nginx) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for phase, title in PHASES.items():
    for name, r in runs.items():
        if phase not in r:
            continue
        cells = r[phase]["rows"][0]["targets"]

        def ratio(t):
            c = cells[t]
            return f"{c['rps_vs_nginx']:.2f} ({c['rps_vs_nginx_rounds']['min']:.2f}-{c['rps_vs_nginx_rounds']['max']:.2f})"

        cpu = ", ".join(f"{cells[t]['cpu_us_per_request']['median']:.0f}" for t in TARGETS)
        p99 = (f"{cells['prefixgate-prefix-cache']['p99_us']['median'] / 1000:.2f} "
               f"({cells['nginx']['p99_us']['median'] / 1000:.2f})")
        print(f"| {title} | {name} | {ratio('prefixgate-prefix-cache')} | {ratio('prefixgate-random')} | "
              f"{ratio('haproxy')} | {cpu} | {p99} |")
