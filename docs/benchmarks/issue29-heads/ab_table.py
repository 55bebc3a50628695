"""Prints the before/after table of docs/benchmarks.md ("The engine's head read directly") from the four
alternating runs in overhead-ab/ (1-base, 2-new, 3-new, 4-base): per phase and strategy, the median requests/s
ratio to nginx in the same run and the CPU us per request. Run from the repository root with /usr/bin/python3;
another session's runs: give their overhead-ab folder (docs/benchmarks/issue29-requests/overhead-ab, "The client's
head read directly")."""
import json
import sys
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "overhead-ab"
runs = sorted(p for p in HERE.iterdir() if p.is_dir())
print("| prefixgate / nginx requests/s, medians of 5 rounds; CPU us per request | " +
      " | ".join(f"{r.name.split('-')[1]}, run {r.name.split('-')[0]}" for r in runs) + " |")
print("| --- |" + " --- |" * len(runs))
for phase, label in (("throughput", "2 KiB one body"), ("families", "2 KiB families")):
    for target in ("prefixgate-prefix-cache", "prefixgate-random"):
        cells = []
        for r in runs:
            t = json.loads((r / "overhead.json").read_text())[phase]["rows"][0]["targets"][target]
            cells.append(f"{t['rps_vs_nginx']:.2f}x, {t['cpu_us_per_request']['median']:.1f}")
        print(f"| {target.split('-', 1)[1]}, {label} | " + " | ".join(cells) + " |")
    cells = []
    for r in runs:
        t = json.loads((r / "overhead.json").read_text())[phase]["rows"][0]["targets"]["nginx"]
        cells.append(f"{t['cpu_us_per_request']['median']:.1f}")
    print(f"| nginx CPU us per request, {label} | " + " | ".join(cells) + " |")
