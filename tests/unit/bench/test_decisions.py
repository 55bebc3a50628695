"""decisions: which requests followed their group's previous request to its pod, what that gained, how much
lighter the pod a moved request went to was, and the report's Decisions table, on hand-made records."""
import math
import random

import pytest

from bench.aggregate import aggregate
from bench.decisions import PodLoad, decision_stats
from bench.model import Record
from bench.report import decisions_table


def rec(rid, group, pod, send, e2e=1.0, prompt=100, cached=0, ttft=0.1, match=-1, status=200):
    return Record(rid=rid, group=group, stage=0, send_s=send, status=status, pod=pod, ttft_s=ttft, e2e_s=e2e,
                  prompt_tokens=prompt, cached_tokens=cached, match_percent=match)


def two_conversations():
    """Group 1 on pods a a b b (a failed request on c between its last two), group 2 on b a a, group 3 alone;
    listed out of send order, as the load generator records them (completion order)."""
    records = [
        rec(0, 1, "a", 0.0), rec(1, 1, "a", 10.0, cached=80, ttft=0.1, match=90),
        rec(2, 1, "b", 20.0, cached=0, ttft=1.0, match=10), rec(3, 1, "c", 25.0, status=0),
        rec(4, 1, "b", 30.0, cached=90, ttft=0.2, match=90),
        rec(5, 2, "b", 1.0, prompt=200), rec(6, 2, "a", 11.0, prompt=300, cached=60, ttft=2.0),
        rec(7, 2, "a", 21.0, prompt=200, cached=150, ttft=0.3, match=90),
        rec(8, 3, "c", 5.0, prompt=50),
    ]
    random.Random(7).shuffle(records)
    return records


def test_requests_follow_or_move_in_send_order_over_ok_requests():
    """Ensures each request after its group's first is compared with the group's previous ok request in send order
    (3 of 5 followed), and hit ratio, TTFT p90 and the gateway's match are split between followed and moved."""
    stats = decision_stats(two_conversations())
    assert stats["follow_rate"] == pytest.approx(3 / 5)
    assert stats["hit_followed"] == pytest.approx((80 + 90 + 150) / (100 + 100 + 200))
    assert stats["hit_moved"] == pytest.approx((0 + 60) / (100 + 300))
    assert stats["ttft_p90_followed"] == pytest.approx(0.28)     # 0.1 0.2 0.3: position 1.8
    assert stats["ttft_p90_moved"] == pytest.approx(1.9)         # 1.0 2.0: position 0.9
    assert stats["match_moved_mean"] == pytest.approx(10.0)      # the moved request without the header ignored


def test_moved_share_of_misses_counts_uncached_tokens_after_each_groups_first():
    """Ensures the moves' share of misses = uncached prompt tokens of moved requests / of every request after its
    group's first (the groups' first requests, all misses, are left out)."""
    stats = decision_stats(two_conversations())
    moved, followed = (100 - 0) + (300 - 60), (100 - 80) + (100 - 90) + (200 - 150)
    assert stats["moved_share_of_misses"] == pytest.approx(moved / (moved + followed))


def test_in_flight_counts_send_to_end_intervals_per_pod_without_the_request_itself():
    """Ensures a pod's in-flight count at t holds the requests with send <= t < end there, and `exclude` drops the
    request being sent only while it is in flight."""
    records = [rec(0, 0, "a", 0.0, e2e=2.0), rec(1, 0, "a", 1.0, e2e=2.0), rec(2, 0, "b", 0.5, e2e=0.5)]
    load = PodLoad(records)
    assert [load.at("a", t) for t in (-0.1, 0.0, 1.0, 1.99, 2.0, 3.0)] == [0, 1, 2, 2, 1, 0]
    assert [load.at("b", t) for t in (0.5, 0.99, 1.0)] == [1, 1, 0]
    assert load.at("a", 1.0, exclude=records[1]) == 1 and load.at("a", 3.0, exclude=records[1]) == 0
    assert load.at("b", 0.5, exclude=records[1]) == 1 and load.at("nowhere", 1.0) == 0


def test_the_in_flight_gap_of_moves_is_the_median_of_previous_minus_chosen_pod():
    """Ensures each moved request's gap = in flight at its group's previous pod - at the pod it went to (itself
    excluded) when sent, and the figure is their median (gaps 2, -2, 2)."""
    background = [rec(100 + i, 100 + i, "a", 0.0, e2e=10.0) for i in range(3)] + [rec(103, 103, "b", 0.0, e2e=10.0)]
    moves = [rec(0, 7, "a", -5.0), rec(1, 7, "b", 5.0, e2e=0.5),
             rec(2, 8, "b", -5.0), rec(3, 8, "a", 6.0, e2e=0.5),
             rec(4, 9, "a", -3.0), rec(5, 9, "b", 7.0, e2e=0.5)]
    stats = decision_stats(background + moves)
    assert stats["follow_rate"] == 0.0
    assert stats["inflight_gap_moved"] == 2


def test_pods_per_group_counts_groups_of_two_or_more_and_load_cv_the_whole_fleet():
    """Ensures pods per group is the mean of distinct pods over groups with two ok requests or more, and the load
    CV is the population CV of requests per pod, pods that served nothing (`pods`) counted, failures not."""
    records = [rec(0, 1, "a", 0.0), rec(1, 1, "a", 1.0), rec(2, 1, "b", 2.0), rec(3, 1, "a", 3.0),
               rec(4, 2, "a", 0.5), rec(5, 2, "a", 1.5), rec(6, 2, "b", 2.5, status=502),
               rec(7, 3, "a", 4.0), rec(8, 4, "b", 0.0, status=0)]
    assert decision_stats(records)["pods_per_group"] == pytest.approx((2 + 1) / 2)
    # Served: a 6, b 1.
    assert decision_stats(records)["pod_load_cv"] == pytest.approx(2.5 / 3.5)
    spread = math.sqrt((4.25 ** 2 + 0.75 ** 2 + 2 * 1.75 ** 2) / 4)   # 6 1 0 0 about their mean 1.75
    assert decision_stats(records, pods=4)["pod_load_cv"] == pytest.approx(spread / 1.75)


def test_figures_without_anything_to_measure_are_nan():
    """Ensures a run where every request followed has NaN for the moves' figures but 0 for their share of misses,
    and a run of single requests NaN for all but the load spread."""
    followed = decision_stats([rec(0, 1, "a", 0.0), rec(1, 1, "a", 2.0, cached=50, match=50)])
    assert followed["follow_rate"] == 1.0 and followed["hit_followed"] == 0.5
    assert followed["moved_share_of_misses"] == 0.0
    for key in ("hit_moved", "ttft_p90_moved", "inflight_gap_moved", "match_moved_mean"):
        assert math.isnan(followed[key]), key
    singles = decision_stats([rec(0, 1, "a", 0.0), rec(1, 2, "b", 0.0)])
    assert singles["pod_load_cv"] == 0.0
    assert all(math.isnan(v) for k, v in singles.items() if k != "pod_load_cv")
    assert all(math.isnan(v) for v in decision_stats([]).values())


def test_the_decisions_table_shows_each_strategys_figures_over_seeds():
    """Ensures the decision figures are aggregated over seeds like the others and the Decisions table puts each in
    its column, with a line saying what every column means."""
    rows = [{"strategy": "sticky", "seed": s, "valid": True, **decision_stats(two_conversations())} for s in (1, 2)]
    rows[1]["follow_rate"] = 0.8
    aggregates = aggregate(rows, ["sticky"])
    assert aggregates["sticky"]["follow_rate"][0] == pytest.approx(0.7)
    lines = decisions_table(aggregates)
    header = [cell.strip() for cell in lines[2].strip("|").split("|")]
    row = dict(zip(header, (cell.strip() for cell in next(l for l in lines if l.startswith("| sticky")).strip("|")
                                                         .split("|"))))
    assert row["follow rate"].startswith("70.0 ± ")
    assert row["hit followed / moved"] == "80.0 ± 0.0 % / 15.0 ± 0.0 %"
    assert row["TTFT p90 s followed / moved"] == "0.280 ± 0.000 / 1.900 ± 0.000"
    assert row["match % of moves"] == "10 ± 0" and row["pods per group"] == "2.00 ± 0.00"
    assert sum(1 for l in lines if l.startswith("- ")) == len(header) - 1
