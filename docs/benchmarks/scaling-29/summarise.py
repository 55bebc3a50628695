#!/usr/bin/python3
"""BM_RouterChooseThreads in this folder: before-roundN.json (std::mutex shard locks) and after-roundN.json
(util::AdaptiveMutex), run in alternating rounds by the same command. Per benchmark: decisions per second over all
threads and CPU microseconds per decision, median of the rounds (every round listed), and 2 threads against 1."""
import json
import statistics
from pathlib import Path

here = Path(__file__).resolve().parent
rows = {}
for side in ("before", "after"):
    for path in sorted(here.glob(f"{side}-round*.json")):
        for b in json.loads(path.read_text())["benchmarks"]:
            if b.get("run_type") != "iteration" or "error_occurred" in b:
                continue
            scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
            cell = rows.setdefault(b["name"], {}).setdefault(side, {"rate": [], "cpu": []})
            cell["rate"].append(b["items_per_second"] / 1e3)
            cell["cpu"].append(b["cpu_time"] * scale)
print("| benchmark | side | thousand decisions/s (rounds) | median | CPU us per decision (median) |")
print("| --- | --- | --- | --- | --- |")
for name, sides in rows.items():
    for side, v in sides.items():
        rounds = ", ".join(f"{x:.0f}" for x in v["rate"])
        print(f"| {name} | {side} | {rounds} | {statistics.median(v['rate']):.0f} | {statistics.median(v['cpu']):.2f} |")
print()
print("| stream, pods | side | 2 threads / 1 thread, decisions/s |")
print("| --- | --- | --- |")
for name in rows:
    if not name.endswith("threads:2"):
        continue
    one = name.replace("threads:2", "threads:1")
    for side in ("before", "after"):
        if side in rows[name] and side in rows.get(one, {}):
            ratio = statistics.median(rows[name][side]["rate"]) / statistics.median(rows[one][side]["rate"])
            label = name.split("8KiB/")[1].split("/real_time")[0]
            print(f"| {label} | {side} | {ratio:.2f} |")
