"""decision_instructions: the totals and per-decision listings read from callgrind_annotate's text."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
import decision_instructions  # noqa: E402

ANNOTATE = """--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
26,272,000 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                   file:function
--------------------------------------------------------------------------------
26,272,000 (100.0%)  /src/routing/router.cpp:prefixgate::routing::Router::choose(...) [/bench]
10,606,000 (40.37%)  /src/index/prefix_index.cpp:prefixgate::index::PrefixIndex::record(...) [/bench]
   994,000 ( 3.78%)  /src/index/block_store.cpp:prefixgate::index::BlockStore::findSlot(...) [/bench]
"""


def test_total_and_top_functions_per_decision():
    """Ensures the total is the PROGRAM TOTALS count (not the first function's) and the listing divides each
    function's count by the decisions, in the listing's order, without the totals line."""
    assert decision_instructions.program_total(ANNOTATE) == 26_272_000
    top = decision_instructions.top_functions(ANNOTATE, 1000, 2)
    assert [round(cost) for cost, _ in top] == [26272, 10606]
    assert "Router::choose" in top[0][1] and "PrefixIndex::record" in top[1][1]
    assert decision_instructions.program_total("no totals here") == 0


def test_marginal_cost_cancels_what_both_runs_share():
    """Ensures the per-decision figure is the difference over the extra decisions: a fixed 16 costly first decisions
    (the warm index's pre-fill) in both runs do not count, and a long run with no more decisions is an error."""
    fixed = 16 * 60_000
    short = (fixed + 100 * 26_000, 116)
    long = (fixed + 1_000 * 26_000, 1_016)
    assert decision_instructions.marginal(short, long) == 26_000
    try:
        decision_instructions.marginal(long, long)
    except RuntimeError as e:
        assert "no more decisions" in str(e)
    else:
        raise AssertionError("expected a RuntimeError")


def test_benchmark_names_become_filters_that_match_them_only():
    """Ensures a name's '-' stays as it is (Google Benchmark's filter did not match an escaped '\\-': the warm-small
    rows ran nothing) and that regex metacharacters are escaped."""
    assert decision_instructions.benchmark_regex("BM_RouterChoose/character/warm-small/8KiB/8pods") == \
        "BM_RouterChoose/character/warm-small/8KiB/8pods"
    assert decision_instructions.benchmark_regex("BM_X/a.b(c)+") == r"BM_X/a\.b\(c\)\+"
