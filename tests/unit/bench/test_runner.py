"""The benchmark's strategy list: named variants, the gateway's own strategies, and variants with settings given on
the command line (a sweep of one setting)."""
import pytest

from bench.runner import ORACLE, resolve_strategies


def test_a_name_may_carry_settings_for_its_gateway_strategy():
    """Ensures `NAME:key=value+key=value` runs NAME with those settings under routing.strategies.<strategy>, values
    typed, on top of a named variant's own config, and that plain names are unchanged."""
    got = dict(resolve_strategies("prefill-cost:prefill_weight=16,prefix-cache-prefill:prefill_weight=2.5+x=on,"
                                  "prefill-cost", ["prefill-cost", "prefix-cache"]))
    assert got["prefill-cost:prefill_weight=16"] == {
        "strategy": "prefill-cost", "strategies": {"prefill-cost": {"prefill_weight": 16}}}
    assert got["prefix-cache-prefill:prefill_weight=2.5+x=on"] == {
        "strategy": "prefix-cache-blend", "blend": {"prefill_cost_weight": 4},
        "strategies": {"prefix-cache-blend": {"prefill_weight": 2.5, "x": "on"}}}
    assert got["prefill-cost"] == {"strategy": "prefill-cost"}
    assert ORACLE not in got


@pytest.mark.parametrize("name", ["no-such:prefill_weight=1", "prefill-cost:prefill_weight", "prefill-cost:",
                                  f"{ORACLE}:x=1"])
def test_a_bad_name_with_settings_is_refused(name):
    """Ensures an unknown base, a pair without '=', no pairs, or settings on the oracle stop the run."""
    with pytest.raises(SystemExit):
        resolve_strategies(name, ["prefill-cost"])
