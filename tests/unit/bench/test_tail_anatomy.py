"""tail_anatomy: what the requests at or above a run's TTFT p90 waited for, on a synthetic run whose slow requests
are one of each kind."""
from bench import tail_anatomy


def rec(rid, group, pod, send, ttft, cached, prompt_ms=50.0):
    return {"rid": rid, "group": group, "pod": pod, "send_s": send, "ttft_s": ttft, "cached_tokens": cached,
            "timings": {"prompt_ms": prompt_ms}}


def test_the_slow_requests_are_told_apart_by_what_they_waited_for():
    """Ensures a group's first request is 'first', one sent before that first had its first token is 'waiter', a
    non-first with nothing cached is 'cold', a warm one whose wait overlapped another group's cold prefill on its pod
    is 'blocked', and a warm one with none of these is 'warm'; requests under the p90 are not classified."""
    fast = [rec(100 + i, 9, "p9", 10.0 + i, 0.05, 1500) for i in range(60)]   # group 9: fast warm requests
    fast.insert(0, rec(99, 9, "p9", 0.0, 0.06, 0))   # group 9's own first, fast (not at or above the p90)
    slow = [
        rec(1, 1, "p1", 1.0, 2.0, 0),                 # group 1's first: cold, 2 s
        rec(2, 1, "p1", 1.5, 2.1, 1500),              # sent while group 1's first had no token yet
        rec(3, 2, "p2", 5.0, 1.0, 0),                 # group 2's first
        rec(4, 2, "p3", 8.0, 1.1, 0),                 # group 2 again, nothing cached: cold elsewhere
        rec(5, 3, "p4", 60.0, 0.3, 0),                # group 3's first, on p4
        rec(6, 2, "p4", 60.1, 1.2, 1500, 100.0),      # warm, waited on p4 while group 3's first prefilled
        rec(7, 2, "p2", 70.0, 1.3, 1500),             # warm, nothing cold around: slowed by the machine
    ]
    got = tail_anatomy.classify(fast + slow)
    assert got[1] == "first" and got[2] == "waiter" and got[3] == "first" and got[4] == "cold"
    assert got[6] == "blocked" and got[7] == "warm"
    assert 5 not in got and 99 not in got and not any(100 <= rid < 160 for rid in got)


def test_main_prints_one_row_per_run_and_totals(tmp_path, capsys):
    """Ensures the command reads records.jsonl.gz, keeps the workload and fleet asked for, and totals per strategy."""
    import gzip
    import json
    path = tmp_path / "records.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for strategy in ("random", "prefix-cache"):
            for r in [rec(i, i % 3, "p0", i * 1.0, 0.1 + i / 100, 0 if i < 3 else 1500) for i in range(20)]:
                f.write(json.dumps({**r, "workload": "shared-prefix", "fleet": "llama", "strategy": strategy,
                                    "seed": 1, "attempt": 0, "status": 200}) + "\n")
        f.write(json.dumps({**rec(0, 0, "p0", 0.0, 9.0, 0), "workload": "multi-turn", "fleet": "llama",
                            "strategy": "random", "seed": 1, "attempt": 0, "status": 200}) + "\n")
    assert tail_anatomy.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "| prefix-cache | 1 |" in out and "| random | all |" in out and "| prefix-cache | all |" in out
