"""aggregate: mean and 95 % confidence intervals (checked against hand-computed t values and a numerical integral
of the t density), the oracle ratio and the per-strategy aggregates."""
import math

import pytest

from bench.aggregate import T95, add_oracle_ratios, aggregate, mean_ci, short_of_seeds, t95


def t_cdf(x, df, steps=20000):
    """P(T <= x) for Student's t with df degrees of freedom, by Simpson's rule from 0 (independent of the table)."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    f = lambda t: c * (1 + t * t / df) ** (-(df + 1) / 2)  # noqa: E731
    h = x / steps
    total = f(0) + f(x) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, steps))
    return 0.5 + total * h / 3


def test_the_t_table_gives_two_sided_95_percent_quantiles():
    """Ensures every table entry t satisfies P(T <= t) = 0.975 for its degrees of freedom."""
    for df, t in T95.items():
        assert t_cdf(t, df) == pytest.approx(0.975, abs=2e-5), df


def test_t95_interpolates_between_rows_and_tends_to_the_normal():
    """Ensures degrees of freedom between table rows give a value between them, close to the true quantile."""
    assert T95[30] > t95(35) > T95[40]
    assert t_cdf(t95(35), 35) == pytest.approx(0.975, abs=2e-4)
    assert 1.96 < t95(1000) < T95[120]
    with pytest.raises(ValueError):
        t95(0)


def test_mean_ci_by_hand():
    """Ensures mean, half-width t(n-1) x s / sqrt(n) and n, computed by hand."""
    mean, half, n = mean_ci([1, 2, 3, 4, 5])          # s = sqrt(2.5), se = sqrt(0.5)
    assert (mean, n) == (3.0, 5) and half == pytest.approx(2.7764 * math.sqrt(0.5))
    mean, half, n = mean_ci([10, 12])                 # s = sqrt(2), se = 1, t(1) = 12.7062
    assert mean == 11.0 and half == pytest.approx(12.7062)
    mean, half, n = mean_ci([7.0, None, float("nan"), 7.0, 7.0])   # missing values are skipped; no spread
    assert (mean, half, n) == (7.0, 0.0, 3)
    mean, half, n = mean_ci([4.0])
    assert mean == 4.0 and math.isnan(half) and n == 1
    assert mean_ci([])[2] == 0 and math.isnan(mean_ci([])[0])


def run(strategy, seed, hit, valid=True, stages=None, **kw):
    return {"strategy": strategy, "seed": seed, "hit_ratio": hit, "valid": valid, "stages": stages, **kw}


def test_of_oracle_divides_by_the_oracles_valid_run_of_the_same_seed():
    """Ensures % of oracle pairs runs by seed and is missing when that seed's oracle run is invalid."""
    runs = [run("oracle", 1, 0.5), run("oracle", 2, 0.8, valid=False), run("random", 1, 0.1), run("random", 2, 0.2)]
    add_oracle_ratios(runs)
    assert runs[2]["of_oracle"] == pytest.approx(0.2) and runs[3]["of_oracle"] is None
    assert runs[0]["of_oracle"] == 1.0


def test_aggregates_use_valid_runs_only_and_count_not_steady_stages():
    """Ensures invalid runs are left out (and counted), and stage verdicts are counted per stage."""
    stage = lambda ttft, steady: [{"rate": 6.0, "ttft": ttft, "steady": steady}]  # noqa: E731
    runs = [run("a", 1, 0.2, ttft_p90=1.0, stages=stage(1.0, True)),
            run("a", 2, 0.4, ttft_p90=3.0, stages=stage(3.0, False)),
            run("a", 3, 0.9, valid=False, ttft_p90=99.0, stages=stage(99.0, False)),
            run("b", 1, 0.5, ttft_p90=2.0, stages=stage(2.0, None))]
    out = aggregate(runs, ["a", "b"])
    a, b = out["a"], out["b"]
    assert a["seeds"] == [1, 2] and a["invalid"] == 1
    assert a["hit_ratio"][0] == pytest.approx(0.3) and a["hit_ratio"][1] == pytest.approx(12.7062 * 0.1)
    assert a["ttft_p90"][:1] == [2.0] and a["stages"][0]["ttft"][0] == 2.0
    assert (a["stages"][0]["not_steady"], a["stages"][0]["runs"]) == (1, 2)
    assert (b["stages"][0]["not_steady"], b["stages"][0]["runs"]) == (0, 0) and math.isnan(b["hit_ratio"][1])
    assert short_of_seeds(out, 2) == [("b", 1)] and short_of_seeds(out, 1) == []
