"""busy_slowdown: a real run's prompt times over the calibration's prediction, filed by how many pods were busy."""
from bench import busy_slowdown, calibrate

CAL = {"prefill": {"overhead_ms": 10.0, "tokens_per_s": 10000.0, "attention_ms_per_m_pairs": 0.0},
       "decode": {"floor_ms": 0.5, "per_seq_ms": 1.0, "attention_ms_per_1k": 1.0}, "client_overhead_ms": 5.0,
       "contention_probe": {"prefill": [1.0, 1.2, 1.6]},
       "in_run": {"w": {"prefill": [1.0, 1.3, 1.7], "decode": [1.0, 1.1, 1.2],
                        "drift": {"prefill": 1.1, "decode": 1.0}}}}


def rec(rid, pod, send, ttft, e2e, new, cached, ms, fleet="llama", seed=1):
    return {"workload": "w", "fleet": fleet, "strategy": "s", "seed": seed, "attempt": 0, "rid": rid, "pod": pod,
            "status": 200, "send_s": send, "ttft_s": ttft, "e2e_s": e2e,
            "timings": {"prompt_n": new, "cache_n": cached, "prompt_ms": ms}}


def test_prompts_are_filed_by_the_pods_busy_at_their_middle_and_compared_with_the_calibration():
    """Ensures each llama request's prompt_ms is divided by the isolated fit's prediction for its tokens and filed
    under the pods with a request in flight at the middle of its prompt (its own counted), cold and warm apart;
    other fleets and other runs do not count as busy pods; and the rendered table shows the medians beside the
    probes' tables (the in-run one times the lone pod's drift)."""
    alone = calibrate.prefill_ms(CAL["prefill"], 1000, 0)            # 110 ms predicted
    records = [
        rec(1, "a", 0.0, 0.5, 1.0, 1000, 0, 1.0 * alone),             # alone on the fleet: k = 1
        rec(2, "a", 10.0, 0.5, 1.0, 1000, 0, 1.5 * alone),            # with pod b busy: k = 2
        rec(3, "b", 9.9, 0.2, 0.8, 1000, 0, 1.0 * alone),             # (its own middle at 10.0: a busy, k = 2)
        rec(4, "c", 20.0, 0.1, 0.2, 100, 1500, 2.0 * calibrate.prefill_ms(CAL["prefill"], 100, 1500)),  # warm, k 1
        rec(5, "z", 0.0, 5.0, 30.0, 1000, 0, 999.0, fleet="sim-shared-cpu"),   # another fleet: not counted
        rec(6, "y", 0.0, 5.0, 30.0, 1000, 0, 1.0 * alone, seed=2),             # another run, alone in its own
    ]
    got = busy_slowdown.slowdown_by_busy(CAL, records)
    assert sorted(got[("w", "cold")][1]) == [1.0, 1.0]
    assert sorted(got[("w", "cold")][2]) == [1.0, 1.5]
    assert got[("w", "warm")][1] == [2.0]
    text = busy_slowdown.render(CAL, got)
    assert "| (the probe before the runs) | cold, alone = 1 | x1.00 | x1.20 | x1.60 |" in text
    assert "| w | cold | x1.00 (2) | x1.25 (2) | - |" in text
    assert "| w | probe between its runs, x lone pod | x1.10 | x1.43 | x1.87 |" in text


def test_time_before_the_prompt_is_shown_per_fleet_and_kind():
    """Ensures the second table gives, per workload, strategy and cold/warm kind, each fleet's median TTFT and TTFT -
    prompt_ms, the real fleet first."""
    records = [rec(1, "a", 0.0, 0.130, 0.2, 60, 1500, 100.0), rec(2, "a", 1.0, 0.150, 0.2, 60, 1500, 110.0),
               rec(3, "b", 0.0, 0.500, 0.6, 1500, 0, 480.0),
               rec(1, "z", 0.0, 0.105, 0.2, 60, 1500, 103.0, fleet="sim-shared-cpu")]
    for r in records:
        r["cached_tokens"] = r["timings"]["cache_n"]
    text = busy_slowdown.before_prompt(records)
    assert text.splitlines()[0] == "| workload | strategy | prompts | llama: TTFT / TTFT - prompt_ms | " \
                                   "sim-shared-cpu: TTFT / TTFT - prompt_ms |"
    assert "| w | s | warm | 140 / 35 ms | 105 / 2 ms |" in text
    assert "| w | s | cold | 500 / 20 ms | - |" in text


def test_a_workload_probed_between_its_runs_is_predicted_with_the_calibration_it_was_fitted_against():
    """Ensures a warm prompt of a workload whose context coefficient was fitted between its runs (against the
    calibration slowed by the lone pod's factor) is predicted with that slowed calibration, the factor then taken
    back out: a prompt exactly as that calibration predicts reads as the factor (2x slower than the calibration
    before the runs), not as a mix of the two calibrations."""
    cal = {**CAL, "warm": {"w": {"context_attention_ms_per_m_pairs": 400.0, "slices": 3}},
           "in_run": {"w": {**CAL["in_run"]["w"], "drift": {"prefill": 2.0, "decode": 1.0}}}}
    slowed = calibrate.with_in_run(cal, cal["in_run"]["w"])
    fit = {**slowed["prefill"], "context_attention_ms_per_m_pairs": 400.0}   # the coefficient as fitted
    records = [rec(1, "a", 0.0, 0.2, 0.3, 60, 1500, calibrate.prefill_ms(fit, 60, 1500))]
    got = busy_slowdown.slowdown_by_busy(cal, records)
    assert got[("w", "warm")][1] == [2.0]
