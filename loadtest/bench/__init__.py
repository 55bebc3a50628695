"""prefixgate's benchmark suite: workloads, a streaming load generator, the quality runner and its report.

Entry points: `quality.py` (routing quality: every workload, seed and strategy, the oracle included) and `trace.py`
(Mooncake traces); scripts/bench_quality.sh runs the full report. Modules: textgen (the simulator's tokenization
and output, replicated), workloads and trace (seeded workloads), loadgen (the client, with send lag), oracle (the
finite-cache reference), runner (one run: pods, gateway, workload), stats (a run's figures, the lag and stage
rules), upper_bound, aggregate (mean and 95 % CI over seeds), report and plots. See docs/benchmarks.md.
"""
