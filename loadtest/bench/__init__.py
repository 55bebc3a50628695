"""prefixgate's benchmark suite: workloads, a streaming load generator, the quality runner and its report.

Entry points: `quality.py` (routing quality, one workload after another, every strategy) and `trace.py`
(Mooncake traces); scripts/bench_quality.sh runs the full report. See docs/benchmarks.md.
"""
