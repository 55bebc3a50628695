#!/usr/bin/python3
"""Before/after table of the quality runner's aggregates (mean ± 95 % CI over seeds) and the per-seed routing
figures that show a decision changed (requests per pod, hit ratio): docs/benchmarks/lifecycle/."""
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
b = json.loads((root / "before" / "summary.json").read_text())
a = json.loads((root / "after" / "summary.json").read_text())
def f(x, scale=1, digits=3):
    m, ci, n = x
    return f"{m*scale:.{digits}f} ± {ci*scale:.{digits}f}"
lines = ["| workload | strategy | TTFT p90 (s) before | after | hit ratio before | after | same pod loads, seed by seed |",
         "|---|---|---|---|---|---|---|"]
same_total = runs_total = 0
for w, wb in b["workloads"].items():
    wa = a["workloads"][w]
    for strat, agg in wb["aggregates"].items():
        ag = wa["aggregates"][strat]
        rb = {r["seed"]: r for r in wb["runs"] if r["strategy"] == strat and r.get("valid", True)}
        ra = {r["seed"]: r for r in wa["runs"] if r["strategy"] == strat and r.get("valid", True)}
        same = sum(1 for s in rb if s in ra and sorted(rb[s]["pod_requests"].values()) == sorted(ra[s]["pod_requests"].values()))
        both = sum(1 for s in rb if s in ra)
        same_total += same; runs_total += both
        lines.append(f"| {w} | {strat} | {f(agg['ttft_p90'])} | {f(ag['ttft_p90'])} | {f(agg['hit_ratio'], 100, 1)} % | "
                     f"{f(ag['hit_ratio'], 100, 1)} % | {same} of {both} |")
print("\n".join(lines))
print(f"\nruns whose sorted requests-per-pod are identical before and after: {same_total} of {runs_total}")
