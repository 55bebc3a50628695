"""calibrate: the fit of llama-server's timings to the simulator's step model, its translation into simulator
flags (tokens scaled by llama's tokens per simulator token), and the in-situ contention factors, on synthetic
samples with known constants."""
import math

import pytest

from bench import calibrate
from bench.model import Record
from bench.real_workloads import FleetParams


def synthetic_prefill(overhead=5.0, per_token_ms=0.08, per_m_pairs=100.0):
    samples = []
    for new, cached in [(150, 0), (300, 0), (600, 0), (1200, 0), (2400, 0), (40, 1200), (100, 1200), (300, 1200)]:
        ms = overhead + per_token_ms * new + per_m_pairs * calibrate.pairs(new, cached) / 1e6
        samples.append((new, cached, ms))
    return samples


def test_pairs_follow_the_simulators_count():
    """Ensures a prefill of n new tokens after c cached ones computes n x (c + (n + 1) / 2) pairs, as
    timing_model.cpp counts them."""
    assert calibrate.pairs(1, 0) == 1 and calibrate.pairs(4, 0) == 10 and calibrate.pairs(2, 10) == 23


def test_prefill_fit_recovers_known_constants():
    """Ensures the least-squares fit returns the overhead, rate and attention cost the samples were made from."""
    fit = calibrate.fit_prefill(synthetic_prefill())
    assert fit["overhead_ms"] == pytest.approx(5.0, abs=1e-6)
    assert fit["tokens_per_s"] == pytest.approx(12500.0, rel=1e-6)
    assert fit["attention_ms_per_m_pairs"] == pytest.approx(100.0, rel=1e-6)
    assert fit["rms_ms"] < 1e-6 and fit["n"] == 8
    assert calibrate.prefill_ms(fit, 1000, 0) == pytest.approx(5.0 + 80.0 + 100.0 * 500500 / 1e6)


def test_a_negative_term_is_dropped_and_the_rest_refitted():
    """Ensures a fit whose free solution has a negative overhead keeps every term non-negative: the overhead is
    set to 0 and the rate and attention refitted."""
    samples = [(n, c, ms - 3.0) for n, c, ms in synthetic_prefill(overhead=1.0)]   # net overhead -2 ms
    fit = calibrate.fit_prefill(samples)
    assert fit["overhead_ms"] == 0.0 and fit["tokens_per_s"] > 0 and fit["attention_ms_per_m_pairs"] >= 0
    assert fit["rms_ms"] < 5.0


def test_a_negative_rate_drops_the_attention_term_instead():
    """Ensures a probe slowed by a busy machine (these samples came from a CI run: prefill time growing faster than its
    pairs explain) keeps a finite, positive prefill rate: the attention term goes, not the per-token one (a fit
    without a rate reported tokens_per_s = inf, written as null)."""
    samples = [(151, 0, 16.705), (261, 10, 29.737), (500, 10, 58.539), (843, 10, 119.653), (1230, 10, 194.944),
               (1675, 10, 384.614), (2463, 10, 853.189), (31, 1225, 35.934), (73, 1226, 49.271), (186, 1226, 73.809),
               (348, 1226, 122.204)]
    fit = calibrate.fit_prefill(samples)
    assert 0 < fit["tokens_per_s"] < math.inf
    assert fit["overhead_ms"] >= 0 and fit["attention_ms_per_m_pairs"] >= 0


def test_decode_fit_separates_step_sequence_and_context_costs():
    """Ensures three probes (one sequence short and long, two sequences short) give back D, S and C of step = D +
    S x sequences + C x context / 1000."""
    d, s, c = 0.5, 2.0, 1.0
    one_short = (d + s + c * 0.2, 200)
    one_long = (d + s + c * 3.0, 3000)
    two_short = (d + 2 * s + c * 0.4, 200)             # two sequences of 200 tokens each
    fit = calibrate.fit_decode(one_short, one_long, two_short)
    assert fit == pytest.approx({"floor_ms": d, "per_seq_ms": s, "attention_ms_per_1k": c})
    assert calibrate.decode_step_ms(fit, 1000) == pytest.approx(d + s + c)


def calibration(r=0.8):
    return {"prefill": {"overhead_ms": 5.0, "tokens_per_s": 10000.0, "attention_ms_per_m_pairs": 100.0},
            "decode": {"floor_ms": 0.5, "per_seq_ms": 2.0, "attention_ms_per_1k": 1.0},
            "client_overhead_ms": 7.0, "llama_per_sim_token": r}


def flag(flags, name):
    return flags[flags.index(name) + 1]


def test_sim_flags_scale_tokens_so_the_same_text_takes_the_same_time():
    """Ensures a simulator token standing for r llama tokens gets the prefill rate / r, attention x r^2 (pairs),
    decode attention x r, token budget and the slots' context / r, and the step overhead O + H - D - S; its cache
    is llama.cpp's (slots, and the host prompt cache unless --cache-ram 0)."""
    r = 0.8
    flags = calibrate.sim_flags(calibration(r), FleetParams(parallel=2, ctx=4096, cache_ram_mib=0), block_size=4)
    assert float(flag(flags, "--prefill-tokens-per-s")) == pytest.approx(10000.0 / r)
    assert float(flag(flags, "--prefill-attention-ms-per-m-pairs")) == pytest.approx(100.0 * r * r)
    assert float(flag(flags, "--attention-ms-per-1k-context")) == pytest.approx(1.0 * r)
    assert float(flag(flags, "--step-overhead-ms")) == pytest.approx(5.0 + 7.0 - 0.5 - 2.0)
    assert flag(flags, "--decode-ms-per-token") == "0.5" and flag(flags, "--decode-ms-per-running-seq") == "2"
    assert flag(flags, "--max-num-seqs") == "2" and flag(flags, "--block-size") == "4"
    assert flag(flags, "--kv-capacity-tokens") == str(round(4096 / r))          # the slots' context
    assert flag(flags, "--kv-cache-model") == "slots" and flag(flags, "--host-cache-tokens") == "0"
    assert flag(flags, "--max-num-batched-tokens") == str(round(2048 / r))
    # The same uncached prompt text: n llama tokens = n / r simulator tokens, the same prefill time.
    n = 1600
    llama_ms = 1000.0 * n / 10000.0 + 100.0 * calibrate.pairs(n, 0) / 1e6
    sim_n = n / r
    sim_ms = (1000.0 * sim_n / float(flag(flags, "--prefill-tokens-per-s"))
              + float(flag(flags, "--prefill-attention-ms-per-m-pairs")) * calibrate.pairs(sim_n, 0) / 1e6)
    assert sim_ms == pytest.approx(llama_ms, rel=0.01)
    default = calibrate.sim_flags(calibration(r), FleetParams(), block_size=4)
    assert flag(default, "--kv-capacity-tokens") == str(round(8192 / r))          # two slots of 4,096
    assert flag(default, "--host-cache-tokens") == str(calibrate.SIM_HOST_CACHE_TOKENS)   # the host prompt cache


def test_step_overhead_is_never_negative():
    """Ensures a decode step dearer than the fixed costs gives a zero step overhead, not a negative one."""
    cal = calibration()
    cal["decode"]["per_seq_ms"] = 50.0
    assert calibrate.step_overhead_ms(cal["prefill"], cal["decode"], cal["client_overhead_ms"]) == 0.0


def rec(pod, send, ttft, end, timings):
    r = Record(rid=0, group=0, stage=0, send_s=send, status=200, pod=pod, ttft_s=ttft, e2e_s=end - send)
    r.timings = timings
    return r


def test_contention_uses_only_requests_alone_on_their_pod():
    """Ensures the in-situ factors compare the timings of requests alone on their pod with the isolated model
    (ratios of sums), leaving out requests that shared their pod while prefilling or decoding."""
    cal = calibration()
    base_prefill = calibrate.prefill_ms(cal["prefill"], 1000, 0)
    step = calibrate.decode_step_ms(cal["decode"], 1000 + 15 / 2)
    alone = rec("a", 0.0, 0.5, 1.0, {"prompt_n": 1000, "cache_n": 0, "prompt_ms": 2 * base_prefill,
                                     "predicted_n": 16, "predicted_ms": 3 * 15 * step})
    # Two requests on pod b overlapping the whole time: neither counts.
    b1 = rec("b", 0.0, 0.5, 1.0, {"prompt_n": 1000, "cache_n": 0, "prompt_ms": 50 * base_prefill,
                                  "predicted_n": 16, "predicted_ms": 50 * step})
    b2 = rec("b", 0.1, 0.5, 1.1, dict(b1.timings))
    # Pod c: the second request starts after the first's first token: the first prefilled alone, decoded with it.
    c1 = rec("c", 0.0, 0.2, 1.0, {"prompt_n": 1000, "cache_n": 0, "prompt_ms": 2 * base_prefill,
                                  "predicted_n": 16, "predicted_ms": 99 * step})
    c2 = rec("c", 0.5, 0.2, 2.0, {"prompt_n": 0, "cache_n": 0})
    got = calibrate.contention(cal, [alone, b1, b2, c1, c2])
    assert got["prefill"] == pytest.approx(2.0) and got["n_prefill"] == 2
    assert got["decode"] == pytest.approx(3.0) and got["n_decode"] == 1
    assert calibrate.contention(cal, [b1, b2]) == {"prefill": 1.0, "decode": 1.0, "n_prefill": 0, "n_decode": 0}


def test_scaled_slows_prefill_and_decode_by_their_factors():
    """Ensures the in-situ calibration divides the prefill rate and multiplies every prefill and overhead time by
    the prefill factor, and every decode time by the decode factor."""
    got = calibrate.scaled(calibration(), {"prefill": 2.0, "decode": 1.5})
    assert got["prefill"] == {"overhead_ms": 10.0, "tokens_per_s": 5000.0, "attention_ms_per_m_pairs": 200.0}
    assert got["decode"] == pytest.approx({"floor_ms": 0.75, "per_seq_ms": 3.0, "attention_ms_per_1k": 1.5})
    assert got["client_overhead_ms"] == 14.0 and got["factors"] == {"prefill": 2.0, "decode": 1.5}


def test_busy_seconds_is_the_union_of_each_pods_requests():
    """Ensures overlapping requests on a pod count once, gaps not at all, failed requests not at all; and the
    slowdown is busy wall time over CPU time."""
    recs = [rec("a", 0.0, 0.1, 1.0, {}), rec("a", 0.5, 0.1, 1.5, {}), rec("a", 3.0, 0.1, 3.5, {}),
            rec("b", 0.0, 0.1, 2.0, {}), rec("b", 0.5, 0.1, 1.0, {})]
    failed = rec("b", 5.0, 0.1, 9.0, {})
    failed.status = 500
    busy = calibrate.busy_seconds(recs + [failed])
    assert busy == pytest.approx({"a": 2.0, "b": 2.0})
    assert calibrate.slowdown([2.0, 2.0], [1.0, 1.0]) == 2.0
    assert calibrate.slowdown([1.0], [0.0]) is None


def test_least_squares_and_a_singular_system():
    """Ensures the normal-equation solver fits a line exactly and reports a singular system as None."""
    assert calibrate.least_squares([(1.0, 0.0), (1.0, 1.0), (1.0, 2.0)], [1.0, 3.0, 5.0]) == pytest.approx([1.0, 2.0])
    assert calibrate.least_squares([(1.0, 1.0), (2.0, 2.0)], [1.0, 2.0]) is None
    assert not math.isnan(calibrate.fit_prefill([(100, 0, 10.0), (200, 0, 20.0)])["rms_ms"])


def test_client_overhead_is_taken_at_the_workloads_prompt_size():
    """Ensures the step overhead uses the probe's overhead line at the workload's mean prompt (llama-server templates
    and tokenizes every prompt, cached or not), and the median when no size or no line is known."""
    cal = calibration() | {"client_overhead_fixed_ms": 2.0, "client_overhead_per_1k_tokens_ms": 4.0}
    assert calibrate.client_overhead_ms(cal, 1500) == pytest.approx(8.0)
    assert calibrate.client_overhead_ms(cal) == 7.0 and calibrate.client_overhead_ms(calibration(), 1500) == 7.0
    flags = calibrate.sim_flags(cal, FleetParams(), prompt_tokens=1500)
    assert float(flag(flags, "--step-overhead-ms")) == pytest.approx(5.0 + 8.0 - 0.5 - 2.0)
    slowed = calibrate.scaled(cal, {"prefill": 2.0, "decode": 1.0})
    assert calibrate.client_overhead_ms(slowed, 1500) == pytest.approx(16.0)


def test_contention_table_is_the_median_slowdown_and_never_falls():
    """Ensures the shared-CPU table is each k's median prompt time over the median alone, starts at 1 and never
    falls below the previous entry (a faster busier machine is noise)."""
    samples = {1: [100.0, 110.0, 90.0], 2: [120.0, 100.0, 140.0], 3: [115.0, 110.0, 118.0], 4: [210.0, 190.0, 200.0]}
    assert calibrate.fit_contention(samples) == pytest.approx([1.0, 1.2, 1.2, 2.0])
    assert calibrate.fit_contention({1: [50.0]}) == [1.0]


def test_shared_cpu_flags_come_from_the_contention_probe():
    """Ensures the simulator gets --shared-cpu-slowdown only from a calibration that probed the fleet's contention,
    the table in order."""
    assert calibrate.shared_cpu_flags({"prefill": {}}) == []
    flags = calibrate.shared_cpu_flags({"contention_probe": {"prefill": [1.0, 1.05, 1.6, 2.25], "decode": [1.0]}})
    assert flags == ["--shared-cpu-slowdown", "1,1.05,1.6,2.25"]


def test_context_attention_is_the_median_cost_per_cached_pair_beyond_the_cold_fit():
    """Ensures warm prompts (more than the template's tokens cached) are told from cold ones, that the context
    coefficient C is what the cold fit leaves unexplained per million (new, cached) pairs (the median: one odd
    sample does not move it), and that prefill_ms then charges new x cached pairs at C, the rest at A."""
    cold_fit = {"overhead_ms": 5.0, "tokens_per_s": 10000.0, "attention_ms_per_m_pairs": 100.0}
    true = {**cold_fit, "context_attention_ms_per_m_pairs": 400.0}
    warm = [(new, 1200, calibrate.prefill_ms(true, new, 1200)) for new in (30, 60, 60, 90, 180)]
    warm.append((60, 1200, 1000.0))                                   # one outlier
    cold, got_warm = calibrate.split_cold([(500, 10, 60.0), (60, 16, 20.0)] + warm)
    assert [s[0] for s in cold] == [500, 60] and got_warm == warm
    got = calibrate.fit_context_attention(cold_fit, warm)
    assert got["context_attention_ms_per_m_pairs"] == pytest.approx(400.0) and got["n"] == 6
    assert got["median_error"] == pytest.approx(0.0, abs=1e-9)
    # prefill_ms with C: the cached pairs at C, the new tokens' own pairs at A.
    assert calibrate.prefill_ms(true, 60, 1200) == pytest.approx(
        5.0 + 6.0 + 100.0 * calibrate.pairs(60, 0) / 1e6 + 400.0 * 60 * 1200 / 1e6)
    # Without C, as before: every pair at A.
    assert calibrate.prefill_ms(cold_fit, 60, 1200) == pytest.approx(5.0 + 6.0 + 100.0 * calibrate.pairs(60, 1200) / 1e6)
    # Warm prompts cheaper than the cold fit: C is 0, never negative; no warm prompt: None.
    cheap = [(60, 1200, 1.0)] * 3
    assert calibrate.fit_context_attention(cold_fit, cheap)["context_attention_ms_per_m_pairs"] == 0.0
    assert calibrate.fit_context_attention(cold_fit, [])["context_attention_ms_per_m_pairs"] is None


def test_sim_flags_take_the_workloads_own_context_attention():
    """Ensures --context-attention-ms-per-m-pairs is the workload's own C (x r^2, pairs of tokens) where it was
    probed, the probe's C otherwise, and absent (the simulator's default) when neither was measured; and that the
    in-situ scaling slows both."""
    r = 0.8
    cal = calibration(r)
    assert "--context-attention-ms-per-m-pairs" not in calibrate.sim_flags(cal, FleetParams(), workload="w")
    cal["prefill"]["context_attention_ms_per_m_pairs"] = 300.0
    cal["warm"] = {"w": {"context_attention_ms_per_m_pairs": 500.0, "n": 40}}
    own = calibrate.sim_flags(cal, FleetParams(), workload="w")
    other = calibrate.sim_flags(cal, FleetParams(), workload="other")
    assert float(flag(own, "--context-attention-ms-per-m-pairs")) == pytest.approx(500.0 * r * r)
    assert float(flag(other, "--context-attention-ms-per-m-pairs")) == pytest.approx(300.0 * r * r)
    slowed = calibrate.scaled(cal, {"prefill": 2.0, "decode": 1.0})
    assert calibrate.context_attention(slowed, "w") == 1000.0 and calibrate.context_attention(slowed) == 600.0


def test_sim_context_min_rows_is_fitted_in_the_simulators_tokens():
    """Ensures the simulator's thin-batch width is fitted per request warm on both engines against llama's prompt
    time plus the client overhead the simulated step includes, less the simulated time without the option (cold
    requests and unpaired ones skipped): the short questions after a long cached prefix set it, a long turn after a
    short cached prefix (wider than it) neither moves it nor pays for it; and that sim_flags takes it before any
    per-pair coefficient."""
    pair_ms = 100.0   # the simulator's context pairs without the option: 100 ms per 1e6
    # 3 questions: 59 new after 2,000 cached; 40 ms simulated without the option; H = 18 ms, so 78 ms unexplained
    # each = 2,000 x (N - 59) x 1e-4 ms: N = 59 + 390 = 449
    llama = {0: (1600, 10, 400.0),                      # cold: skipped
             1: (62, 1572, 100.0), 2: (62, 1572, 100.0), 3: (62, 1572, 100.0),
             4: (700, 450, 150.0),                      # a long turn: the simulator already right (+-0)
             5: (60, 1500, 90.0)}                       # no simulated twin: skipped
    sim = {0: (2060, 0, 300.0), 1: (59, 2000, 40.0), 2: (59, 2000, 40.0), 3: (59, 2000, 40.0), 4: (900, 600, 168.0)}
    got = calibrate.fit_sim_context_min_rows(llama, sim, overhead_ms=18.0, pair_ms=pair_ms)
    assert got["sim_n"] == 4
    assert got["sim_context_min_rows"] == 449
    assert got["sim_rms_ms"] == pytest.approx(0.0)
    # A simulated twin that reused only the template's few tokens is not warm: skipped.
    assert calibrate.fit_sim_context_min_rows(llama, {**sim, 5: (59, 8, 40.0)}, 18.0, pair_ms) == got
    # One coefficient per pair for every request would have charged the long turn its 900 x 600 pairs at the
    # questions' rate (78 / (59 x 2000) per pair: ~357 ms more); the width charges it nothing.
    assert 600 * max(0, got["sim_context_min_rows"] - 900) == 0
    assert calibrate.fit_sim_context_min_rows(llama, {}, 18.0, pair_ms) == {"sim_context_min_rows": None,
                                                                           "sim_n": 0, "sim_rms_ms": None}
    # The simulator already slower than llama: no width (0), not a negative one.
    cheap = calibrate.fit_sim_context_min_rows({1: (62, 1572, 1.0)}, {1: (59, 2000, 400.0)}, 0.0, pair_ms)
    assert cheap["sim_context_min_rows"] == 0
    r = 0.8
    cal = calibration(r) | {"warm": {"w": {"context_attention_ms_per_m_pairs": 500.0, "sim_context_min_rows": 449}}}
    flags = calibrate.sim_flags(cal, FleetParams(), workload="w")
    assert flag(flags, "--context-min-rows") == "449" and "--context-attention-ms-per-m-pairs" not in flags
    assert float(flag(flags, "--prefill-attention-ms-per-m-pairs")) == pytest.approx(calibrate.sim_pair_ms(cal))
    # A calibration file written before the width: its per-pair coefficient is still taken (and scaled in situ).
    old = calibration(r) | {"warm": {"w": {"context_attention_ms_per_m_pairs": 500.0,
                                           "sim_context_attention_ms_per_m_pairs": 123.0}}}
    assert float(flag(calibrate.sim_flags(old, FleetParams(), workload="w"),
                      "--context-attention-ms-per-m-pairs")) == pytest.approx(123.0)
    assert calibrate.sim_context_attention(calibrate.scaled(old, {"prefill": 2.0, "decode": 1.0}), "w") == 246.0


def test_contention_predicts_warm_prompts_with_the_workloads_own_context_attention():
    """Ensures the in-situ prefill factor of a workload's runs compares a warm prompt alone on its pod with the
    isolated model at that workload's context coefficient (not the probe's, not A for every pair)."""
    cal = calibration() | {"warm": {"w": {"context_attention_ms_per_m_pairs": 500.0}}}
    cal["prefill"]["context_attention_ms_per_m_pairs"] = 300.0
    own = {**cal["prefill"], "context_attention_ms_per_m_pairs": 500.0}
    warm = rec("a", 0.0, 0.5, 1.0, {"prompt_n": 60, "cache_n": 1500,
                                    "prompt_ms": 2 * calibrate.prefill_ms(own, 60, 1500)})
    assert calibrate.contention(cal, [warm], "w")["prefill"] == pytest.approx(2.0)
    probe = {**cal["prefill"]}
    assert calibrate.contention(cal, [warm])["prefill"] == pytest.approx(
        2 * calibrate.prefill_ms(own, 60, 1500) / calibrate.prefill_ms(probe, 60, 1500))


def test_contention_round_records_each_busy_count_and_the_lone_pods_speed(monkeypatch):
    """Ensures a round of the contention probe has k pods prefill (and decode) at once for k = 1 .. pods, each time
    a sample per busy pod, and, given a calibration, records how much slower than it predicts the lone pod (k = 1)
    prefilled and decoded: the machine's speed while the real runs ran."""
    import concurrent.futures
    cal = calibration()
    calls = []

    def fake_stream(pod, messages, max_tokens, spans=None):
        calls.append((pod, max_tokens))
        if max_tokens == 1:   # a cold prompt of 1,500 tokens, twice what the calibration predicts
            return 1.0, {"prompt_n": 1500, "cache_n": 0,
                         "prompt_ms": 2.0 * calibrate.prefill_ms(cal["prefill"], 1500, 0)}, ""
        steps = max_tokens - 1   # decode steps 1.5x the calibration's at their context
        step = calibrate.decode_step_ms(cal["decode"], 20 + steps / 2)
        return 1.0, {"prompt_n": 20, "cache_n": 0, "prompt_ms": 3.0, "predicted_n": max_tokens,
                     "predicted_ms": 1.5 * step * steps}, ""

    monkeypatch.setattr(calibrate, "_stream", fake_stream)
    samples = {"prefill": {}, "decode": {}}
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        calibrate.contention_round(pool, ["a", "b", "c"], samples, seed=1, rep=0, cal=cal)
        calibrate.contention_round(pool, ["a", "b", "c"], samples, seed=1, rep=1)   # no calibration: no ratio
    assert {k: len(v) for k, v in samples["prefill"].items()} == {1: 2, 2: 4, 3: 6}
    assert {k: len(v) for k, v in samples["decode"].items()} == {1: 2, 2: 4, 3: 6}
    assert len(calls) == 2 * 2 * (1 + 2 + 3)
    assert samples["alone"]["prefill"] == [pytest.approx(2.0)]
    assert samples["alone"]["decode"] == [pytest.approx(1.5)]


def test_in_run_contention_replaces_the_probes_and_slows_the_calibration_as_the_lone_pod_was():
    """Ensures the probe rounds between a workload's real runs give the slowdown table (medians over the lone
    pod's) and the drift (the lone pod's median time over the calibration's), and that the calibration taken for
    sim-shared-cpu then has that table as its contention and its prefill and decode slowed by the drift."""
    samples = {"prefill": {1: [200.0, 220.0, 180.0], 2: [240.0, 260.0, 250.0, 230.0, 250.0, 260.0],
                           3: [300.0] * 9, 4: [440.0] * 12},
               "decode": {1: [2.0, 2.0, 2.0], 2: [2.0] * 6, 3: [3.0] * 9, 4: [4.0] * 12},
               "alone": {"prefill": [1.2, 1.1, 1.3], "decode": [1.0, 0.9, 1.05]}}
    fit = calibrate.fit_in_run(samples)
    assert fit["prefill"] == pytest.approx([1.0, 1.25, 1.5, 2.2])
    assert fit["decode"] == pytest.approx([1.0, 1.0, 1.5, 2.0])
    assert fit["drift"] == pytest.approx({"prefill": 1.2, "decode": 1.0}) and fit["rounds"] == 3
    cal = calibration() | {"contention_probe": {"prefill": [1.0, 1.1, 1.4, 1.9], "decode": [1.0]}}
    taken = calibrate.with_in_run(cal, fit)
    assert calibrate.shared_cpu_flags(taken) == ["--shared-cpu-slowdown", "1,1.25,1.5,2.2"]
    flags = calibrate.sim_flags(taken, FleetParams())
    assert float(flag(flags, "--prefill-tokens-per-s")) == pytest.approx(10000.0 / 1.2 / 0.8, rel=1e-5)
    assert float(flag(flags, "--prefill-attention-ms-per-m-pairs")) == pytest.approx(100.0 * 1.2 * 0.64, rel=1e-5)
    assert calibrate.shared_cpu_flags(cal) == ["--shared-cpu-slowdown", "1,1.1,1.4,1.9"]   # the original kept
    # No lone-pod sample (a calibration file without a model to compare with): no drift.
    assert calibrate.fit_in_run({k: v for k, v in samples.items() if k != "alone"})["drift"] == {"prefill": 1.0,
                                                                                                "decode": 1.0}


def test_workload_slices_keep_every_session_whole_and_in_order():
    """Ensures the probe's requests cut to go between the runs are the workload's sessions in order, each session
    whole in one slice, no slice empty, and never more slices than sessions."""
    from bench.model import Workload

    workload = Workload(name="w", title="", description="", sessions=[f"s{i}" for i in range(7)])
    slices = calibrate.workload_slices(workload, 3)
    assert [s.sessions for s in slices] == [["s0", "s1"], ["s2", "s3", "s4"], ["s5", "s6"]]
    assert all(s.name == "w" for s in slices)
    assert [s.sessions for s in calibrate.workload_slices(workload, 10)] == [[f"s{i}"] for i in range(7)]
    assert [s.sessions for s in calibrate.workload_slices(workload, 0)] == [workload.sessions]
