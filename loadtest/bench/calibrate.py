"""Calibrating the engine simulator against llama.cpp's llama-server on this machine, and expressing what was measured
as prefixgate-engine-sim flags (real.py runs both fleets; docs/benchmarks.md, "Real engines (llama.cpp)").

The probe (`probe`, I/O) sends requests straight to ONE llama-server started alone (`-t 1 --parallel 2`, nothing
else of the benchmark running), and reads llama-server's own `timings` of each answer and the client's TTFT:
- prefill: fresh prompts of 150 to 3,000 tokens (cold), and a cached ~1,500-token prefix with 16 to 400 new tokens
  (after one unmeasured request on the prefix: the first reuse of a slot's cold prefill is cheaper than the rest);
- decode: 64 tokens after a short and after a ~3,000-token prompt (one sequence), and two sequences at once (the
  two slots decoding together);
- the client overhead: TTFT minus prompt_ms (HTTP, chat template, tokenization, the first sampling);
- tokens: llama's tokens per simulator token on the benchmark's own text (the simulator cuts 4-byte pieces).

The fit (pure, unit-tested) follows the simulator's step model (loadtest/engine_sim/timing_model.h):
  prompt_ms = O + 1000 x new / R + A x new (new + 1) / 2 / 1e6 + C x new x cached / 1e6
O, R, A by least squares with non-negative terms (a negative one is dropped and the rest refitted) over the cold
prompts; C (the simulator's --context-attention-ms-per-m-pairs: new tokens against a cached prefix) is the median,
over warm prompts, of what the cold fit leaves unexplained per million (new, cached) pairs. llama.cpp on this CPU
computes a short prompt after a long cached prefix in a thin batch, several times less efficiently per pair than a
long prompt's own attention, and unevenly with the prompt's size (the probe's samples in
docs/benchmarks/real-engine-contention/calibration.json, ~1,240 cached: 30 new tokens 38 ms, 61 new 55-78 ms, 72 new
34-40 ms, 182 new 73-79 ms; loadtest/bench/warm_cost.py measures the series). So C is also measured per workload
(`probe_workload`): the workload's own requests (another seed) one at a time on one llama-server with the workload's
flags; and since a short question is not r times as many simulator tokens as llama tokens, the simulator's own
model is fitted on the same requests sent to one simulated pod (`probe_workload_sim`, `fit_sim_context_min_rows`),
in its own tokens: a prompt chunk thinner than --context-min-rows attends to its cached prefix at the cost of that
many rows (flat in its new tokens below it, per pair above it: a long turn after a cached system prompt is not
charged a short question's per-pair cost). Per decode step
  step_ms = D + S x sequences + C x context / 1000
from the three decode probes (D, S, C: the simulator's --decode-ms-per-token, --decode-ms-per-running-seq,
--attention-ms-per-1k-context). The simulator's prefill step also pays D + S, and the client overhead H (TTFT -
prompt_ms: HTTP, chat template, tokenizing, which grows with the prompt, cached or not) is paid once per request,
so its --step-overhead-ms = O + H - D - S (at least 0), H taken at the workload's mean prompt size.

Tokens: r = llama tokens per simulator token for the same text. One simulator token stands for r llama tokens,
so the simulator's prefill rate is R / r (the same prompt TEXT takes the same prefill TIME), its prefill attention
A x r^2 (pairs of tokens), its decode attention C x r, its KV capacity and token budget / r. Output tokens are one
per step on both (llama: one SentencePiece token, simulator: one 4-byte word), so decode needs no scaling.

In-situ factors (`contention`): four one-thread pods share two cores (and their caches), so during a benchmark
run a pod computes slower than alone. From the real runs' own timings, of the requests that were alone on their pod
(no batch mate, no slot queue: what the simulator models itself), prompt_ms against what the isolated fit predicts
for the same (new, cached) tokens and the decode time against the isolated step: the ratios of sums are the
slowdown of prefill and of decode, and `scaled` applies them to the isolated constants: the "in-situ" calibration,
one per workload from its real runs. It never looks at the TTFT figures it is compared against. What two factors
cannot say: contention comes and goes (a pod prefilling alone on the machine runs at full speed, four at once
share two cores), and the simulator applies the average to every step. (`slowdown`, busy wall time over CPU time
per pod from /proc, is reported beside it as a cross-check: how much of a core a busy pod got.)
"""
import concurrent.futures
import http.client
import json
import math
import statistics
import time

from bench.fleet import process_cpu_seconds
from bench.real_workloads import english
from bench.textgen import text_tokens
from harness import request, sse_events

SIM_BATCH_TOKENS_LLAMA = 2048   # llama-server's default -b (n_batch): prompt tokens per llama_decode call
# llama-server's default host prompt cache (--cache-ram 8 GiB) keeps every prompt of these workloads: in simulator
# tokens, a bound they never reach.
SIM_HOST_CACHE_TOKENS = 10_000_000


# --- the fit (pure) ---------------------------------------------------------------------------------------------
def pairs(new, cached):
    """(new token, context token) pairs a prefill of `new` tokens after `cached` computes (the simulator's count)."""
    return new * (cached + (new + 1) / 2)


def _solve(a, b):
    """Solves the square system a x = b (Gaussian elimination, partial pivoting); None when singular."""
    n = len(b)
    m = [list(row) + [rhs] for row, rhs in zip(a, b)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def least_squares(rows, ys):
    """Ordinary least squares coefficients of ys on the columns of rows (normal equations); None when singular."""
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    return _solve(ata, aty)


def fit_prefill(samples):
    """samples = [(new tokens, cached tokens, prompt_ms)] -> {"overhead_ms": O, "tokens_per_s": R,
    "attention_ms_per_m_pairs": A, "rms_ms", "n"}: prompt_ms = O + 1000 new / R + A pairs / 1e6, every term >= 0
    (a negative coefficient is dropped, set to 0, and the others refitted; a negative rate term drops the attention
    term first: a prefill always costs per token, and a probe slowed by a busy machine grows faster than its pairs
    explain, which a fit with both terms turns into a negative rate)."""
    rows = [(1.0, float(new), pairs(new, cached) / 1e6) for new, cached, _ in samples]
    ys = [float(ms) for _, _, ms in samples]
    active = list(range(3))
    coef = [0.0, 0.0, 0.0]
    while active:
        got = least_squares([[r[i] for i in active] for r in rows], ys)
        if got is None:
            break
        if all(c >= 0 for c in got):
            coef = [0.0] * 3
            for i, c in zip(active, got):
                coef[i] = c
            break
        if 1 in active and 2 in active and got[active.index(1)] < 0:
            active.remove(2)   # keep the rate: the attention term goes
            continue
        active.pop(min(range(len(active)), key=lambda j: got[j]))   # the most negative term goes
    residuals = [y - sum(c * x for c, x in zip(coef, r)) for r, y in zip(rows, ys)]
    rms = (sum(e * e for e in residuals) / len(residuals)) ** 0.5 if residuals else float("nan")
    return {"overhead_ms": coef[0], "tokens_per_s": 1000.0 / coef[1] if coef[1] > 0 else float("inf"),
            "attention_ms_per_m_pairs": coef[2], "rms_ms": rms, "n": len(samples)}


def prefill_ms(fit, new, cached):
    """What a prefill fit predicts for `new` tokens after `cached` ones (the (new, cached) pairs at the fit's
    context_attention_ms_per_m_pairs when it has one, as the simulator does)."""
    per_token = 1000.0 / fit["tokens_per_s"] if fit["tokens_per_s"] > 0 else 0.0
    context = fit.get("context_attention_ms_per_m_pairs")
    if context is None:
        return fit["overhead_ms"] + per_token * new + fit["attention_ms_per_m_pairs"] * pairs(new, cached) / 1e6
    return (fit["overhead_ms"] + per_token * new + fit["attention_ms_per_m_pairs"] * pairs(new, 0) / 1e6
            + context * new * cached / 1e6)


COLD_CACHED_MAX = 16   # a cold prompt reuses at most the chat template's first tokens (llama-server: ~10)


def split_cold(samples):
    """[(new, cached, prompt_ms)] -> (cold ones, warm ones): warm = more than the template's tokens cached."""
    return ([s for s in samples if s[1] <= COLD_CACHED_MAX], [s for s in samples if s[1] > COLD_CACHED_MAX])


def fit_context_attention(prefill, warm):
    """prefill: a fit of cold prompts (fit_prefill); warm = [(new, cached, prompt_ms)] of prompts after a cached
    prefix -> {"context_attention_ms_per_m_pairs": C, "n", "rms_ms", "median_error"}: per sample, the prompt time
    the cold fit leaves unexplained per million (new, cached) pairs; C = their median, at least 0 (None without a
    warm sample). rms_ms and median_error: the warm samples against the fit with C (median_error relative)."""
    cold = {**prefill, "context_attention_ms_per_m_pairs": 0.0}
    per_pair = [(ms - prefill_ms(cold, new, cached)) / (new * cached / 1e6)
                for new, cached, ms in warm if new > 0 and cached > 0]
    if not per_pair:
        return {"context_attention_ms_per_m_pairs": None, "n": 0, "rms_ms": None, "median_error": None}
    c = max(0.0, statistics.median(per_pair))
    fit = {**prefill, "context_attention_ms_per_m_pairs": c}
    errors = [prefill_ms(fit, new, cached) - ms for new, cached, ms in warm]
    return {"context_attention_ms_per_m_pairs": c, "n": len(per_pair),
            "rms_ms": (sum(e * e for e in errors) / len(errors)) ** 0.5,
            "median_error": statistics.median(e / ms for e, (_, _, ms) in zip(errors, warm) if ms > 0)}


def context_attention(cal, workload=None):
    """The C for `workload`: its own (cal["warm"][workload], probe_workload) where measured, else the probe's."""
    own = ((cal.get("warm") or {}).get(workload) or {}).get("context_attention_ms_per_m_pairs")
    return own if own is not None else cal["prefill"].get("context_attention_ms_per_m_pairs")


def sim_context_attention(cal, workload=None):
    """The simulator's coefficient for `workload`, in simulator tokens: one fitted on a simulated pod where a
    calibration file has it (sim_context_attention_ms_per_m_pairs, written before fit_sim_context_min_rows
    replaced it), else context_attention x r^2; None when nothing was measured."""
    own = ((cal.get("warm") or {}).get(workload) or {}).get("sim_context_attention_ms_per_m_pairs")
    if own is not None:
        return own
    c = context_attention(cal, workload)
    return None if c is None else c * cal["llama_per_sim_token"] ** 2


def fit_decode(single_short, single_long, double_short):
    """Per-step decode model from three probes, each (step ms, context tokens): one sequence at a short and at a
    long context, two sequences at a short context (context per sequence). Returns {"floor_ms": D,
    "per_seq_ms": S, "attention_ms_per_1k": C} with step = D + S x sequences + C x total context / 1000; every
    term >= 0."""
    (t1, c1), (tl, cl), (t2, c2) = single_short, single_long, double_short
    attention = max(0.0, (tl - t1) / ((cl - c1) / 1000.0)) if cl > c1 else 0.0
    # two sequences at context c2 each: D + 2 S + C (2 c2) / 1000; one at c1: D + S + C c1 / 1000
    per_seq = max(0.0, (t2 - attention * 2 * c2 / 1000.0) - (t1 - attention * c1 / 1000.0))
    floor = max(0.0, t1 - per_seq - attention * c1 / 1000.0)
    return {"floor_ms": floor, "per_seq_ms": per_seq, "attention_ms_per_1k": attention}


def step_overhead_ms(prefill, decode, client_overhead_ms):
    """The simulator's --step-overhead-ms: what a request pays before its first token beyond its prefill's token
    terms (llama's fixed prefill cost O and the client-side overhead H), less the decode step the simulator adds
    to every step (D + S); at least 0."""
    return max(0.0, prefill["overhead_ms"] + client_overhead_ms - decode["floor_ms"] - decode["per_seq_ms"])


def client_overhead_ms(cal, prompt_tokens=None):
    """The client overhead H a request of `prompt_tokens` (llama tokens) pays: the probe's line (fixed + per 1,000
    prompt tokens: llama-server templates and tokenizes every prompt, cached or not) at that size, or its median
    without a size (or a calibration without the line)."""
    fixed = cal.get("client_overhead_fixed_ms")
    if prompt_tokens is None or fixed is None:
        return cal["client_overhead_ms"]
    return max(0.0, fixed + cal.get("client_overhead_per_1k_tokens_ms", 0.0) * prompt_tokens / 1000.0)


def sim_pair_ms(cal):
    """The simulator's --prefill-attention-ms-per-m-pairs: the cold fit's A in simulator-token pairs (x r^2)."""
    return cal["prefill"]["attention_ms_per_m_pairs"] * cal["llama_per_sim_token"] ** 2


def sim_flags(cal, params, block_size=4, prompt_tokens=None, workload=None):
    """prefixgate-engine-sim flags standing for llama-server with calibration `cal` ({"prefill", "decode",
    "client_overhead_ms", "llama_per_sim_token"}) and a workload's FleetParams (slots, total context, host cache);
    `prompt_tokens`: the workload's mean prompt (llama tokens), at which the client overhead is taken (the simulator
    has one fixed step overhead, no cost per prompt token); `workload`: its name, for its own cost of new tokens
    after a cached prefix: its --context-min-rows where probed on a simulated pod (fit_sim_context_min_rows), else
    a coefficient per pair (sim_context_attention; none measured: the simulator's default, the prefill one)."""
    r = cal["llama_per_sim_token"]
    prefill, decode = cal["prefill"], cal["decode"]
    rows = ((cal.get("warm") or {}).get(workload) or {}).get("sim_context_min_rows")
    context = None if rows is not None else sim_context_attention(cal, workload)
    extra = (["--context-min-rows", str(rows)] if rows is not None else
             [] if context is None else ["--context-attention-ms-per-m-pairs", f"{context:.6g}"])
    # llama.cpp's cache: one prompt per slot (each ctx / parallel), and its host prompt cache unless --cache-ram 0
    # (the simulator's --kv-cache-model slots follows llama-server's slot and host-cache rules).
    kv = max(2 * params.parallel, round(params.ctx / r))
    host = 0 if params.cache_ram_mib == 0 else SIM_HOST_CACHE_TOKENS
    return ["--kv-cache-model", "slots", "--host-cache-tokens", str(host), "--prefill-tokens-per-s", f"{prefill['tokens_per_s'] / r:.6g}",
            "--prefill-attention-ms-per-m-pairs", f"{sim_pair_ms(cal):.6g}",
            "--step-overhead-ms",
            f"{step_overhead_ms(prefill, decode, client_overhead_ms(cal, prompt_tokens)):.6g}",
            "--decode-ms-per-token", f"{decode['floor_ms']:.6g}",
            "--decode-ms-per-running-seq", f"{decode['per_seq_ms']:.6g}",
            "--attention-ms-per-1k-context", f"{decode['attention_ms_per_1k'] * r:.6g}",
            "--max-num-seqs", str(params.parallel),
            "--max-num-batched-tokens", str(max(1, round(SIM_BATCH_TOKENS_LLAMA / r))),
            "--kv-capacity-tokens", str(kv), "--block-size", str(block_size),
            "--max-model-len", str(max(1, round(params.ctx / params.parallel / r)) + 64)] + extra


def fit_contention(prefill_ms_by_busy):
    """{k: [prompt_ms of a cold prompt while k pods prefilled at once]} -> the slowdown table [1.0, s2, ..., sN]:
    the median at k over the median alone, never below the previous entry (a busier machine is not faster; a
    ratio under 1 is noise). The simulator's --shared-cpu-slowdown."""
    alone = statistics.median(prefill_ms_by_busy[1])
    table = [1.0]
    for k in sorted(prefill_ms_by_busy):
        if k > 1:
            table.append(max(table[-1], statistics.median(prefill_ms_by_busy[k]) / alone))
    return table


def shared_cpu_flags(cal):
    """The flags that add the measured contention to a simulated fleet (each pod also needs `--shared-cpu FILE`,
    one file per fleet: fleet.Fleet adds it); [] when the calibration has no contention probe."""
    table = (cal.get("contention_probe") or {}).get("prefill")
    return ["--shared-cpu-slowdown", ",".join(f"{x:.4g}" for x in table)] if table else []


def busy_seconds(records):
    """{pod: seconds during which it had at least one request in flight} (the union of its ok requests' send ..
    last byte intervals, as the client saw them)."""
    spans = {}
    for rec in records:
        if rec.ok and rec.pod:
            spans.setdefault(rec.pod, []).append((rec.send_s, rec.end_s))
    out = {}
    for pod, intervals in spans.items():
        total, end = 0.0, float("-inf")
        for start, stop in sorted(intervals):
            if stop <= end:
                continue
            total += stop - max(start, end)
            end = stop
        out[pod] = total
    return out


def slowdown(busy_s, cpu_s):
    """How much slower the pods ran than on a core of their own: their busy wall time over the CPU time they got
    in it (sum over pods; None without CPU time). A pod alone on a free core scores about 1 (a little more: the
    client's and the HTTP exchange's share of each request)."""
    cpu = sum(cpu_s)
    return sum(busy_s) / cpu if cpu > 0 else None


def decode_step_ms(decode, context):
    """One sequence's decode step at `context` tokens, alone in its batch: D + S + C x context / 1000."""
    return decode["floor_ms"] + decode["per_seq_ms"] + decode["attention_ms_per_1k"] * context / 1000.0


def alone_on_pod(records):
    """For each ok record with engine timings: (record, alone while its prompt was processed, alone while it
    decoded), alone = no other request of the run in flight at the same pod in that window (client times: send ..
    first token, first token .. last byte). A request alone on its pod shares neither a batch nor a slot queue, so
    its timings show the machine's contention only."""
    by_pod = {}
    for rec in records:
        if rec.ok and rec.pod:
            by_pod.setdefault(rec.pod, []).append(rec)
    out = []
    for rec in records:
        if not rec.ok or not rec.timings or rec.ttft_s < 0:
            continue
        first = rec.send_s + rec.ttft_s
        others = [o for o in by_pod.get(rec.pod, []) if o is not rec]
        prompt_alone = not any(o.send_s < first and o.end_s > rec.send_s for o in others)
        decode_alone = not any(o.send_s < rec.end_s and o.end_s > first for o in others)
        out.append((rec, prompt_alone, decode_alone))
    return out


def contention(cal, records, workload=None):
    """In-situ slowdown of a fleet's pods in real runs of `workload` (its name: its own context attention, as
    context_attention picks it): {"prefill": the prompt time of requests alone on their pod /
    what the isolated fit predicts for the same (new, cached) tokens, "decode": their decode time / (tokens - 1) x
    the isolated step at their context, "n_prefill", "n_decode": requests used} (ratios of sums: time-weighted;
    1.0 where none was alone). What the simulator models itself (batch mates, slot queues) is left out by taking
    only requests alone on their pod."""
    pre_actual = pre_model = dec_actual = dec_model = 0.0
    n_pre = n_dec = 0
    fit = {**cal["prefill"], "context_attention_ms_per_m_pairs": context_attention(cal, workload)}
    for rec, prompt_alone, decode_alone in alone_on_pod(records):
        t = rec.timings
        new, cached = t.get("prompt_n", 0), t.get("cache_n", 0)
        if prompt_alone and t.get("prompt_ms") and new > 0:
            pre_actual += t["prompt_ms"]
            pre_model += prefill_ms(fit, new, cached)
            n_pre += 1
        steps = t.get("predicted_n", 0) - 1
        if decode_alone and t.get("predicted_ms") and steps >= 2:
            dec_actual += t["predicted_ms"]
            dec_model += steps * decode_step_ms(cal["decode"], new + cached + steps / 2)
            n_dec += 1
    return {"prefill": pre_actual / pre_model if pre_model > 0 else 1.0,
            "decode": dec_actual / dec_model if dec_model > 0 else 1.0, "n_prefill": n_pre, "n_decode": n_dec}


def scaled(cal, factors):
    """The calibration with its prefill (and the per-request overheads, CPU work too) slowed by factors["prefill"]
    and its decode by factors["decode"]: the in-situ calibration."""
    p, d = cal["prefill"], cal["decode"]
    fp, fd = factors["prefill"], factors["decode"]
    return {**cal,
            "prefill": {**p, "overhead_ms": p["overhead_ms"] * fp, "tokens_per_s": p["tokens_per_s"] / fp,
                        "attention_ms_per_m_pairs": p["attention_ms_per_m_pairs"] * fp,
                        **({"context_attention_ms_per_m_pairs": p["context_attention_ms_per_m_pairs"] * fp}
                           if p.get("context_attention_ms_per_m_pairs") is not None else {})},
            **({"warm": {name: {**w, **{k: w[k] * fp for k in ("context_attention_ms_per_m_pairs",
                                                               "sim_context_attention_ms_per_m_pairs")
                                        if w.get(k) is not None}}
                         for name, w in cal["warm"].items()}}
               if cal.get("warm") else {}),
            "decode": {k: v * fd for k, v in d.items()},
            "client_overhead_ms": cal["client_overhead_ms"] * fp,
            "client_overhead_fixed_ms": (cal["client_overhead_fixed_ms"] * fp
                                         if cal.get("client_overhead_fixed_ms") is not None else None),
            "client_overhead_per_1k_tokens_ms": cal.get("client_overhead_per_1k_tokens_ms", 0.0) * fp,
            "factors": dict(factors)}


# --- the probe (I/O) --------------------------------------------------------------------------------------------
PREFILL_WORDS = (110, 220, 440, 750, 1100, 1500, 2200)   # about 150 to 3,000 Llama tokens of english()
SUFFIX_WORDS = (12, 50, 150, 300)                        # new tokens after a cached prefix: about 16 to 400
STEADY_WORDS, STEADY_REPEATS = 40, 4                     # then warm requests of a question's size, one after another
REPEATS = 3


def _stream(pod, messages, max_tokens, spans=None):
    """One streamed chat straight to the pod: (client TTFT ms: send to the first content chunk, timings, reply);
    appends its (start, end) perf_counter times to `spans`."""
    body = {"model": pod.model, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection("127.0.0.1", pod.port, timeout=120)
    try:
        start = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        res = conn.getresponse()
        ttft, raw = None, b""
        while True:
            chunk = res.read1(65536)
            if not chunk:
                break
            raw += chunk
            if ttft is None and b'"content":"' in raw:
                ttft = (time.perf_counter() - start) * 1000.0
    finally:
        conn.close()
    if spans is not None:
        spans.append((start, time.perf_counter()))
    if res.status != 200:
        raise RuntimeError(f"calibration request: HTTP {res.status}: {raw[:200]!r}")
    timings, reply = {}, []
    for data in sse_events(raw):
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        for choice in chunk.get("choices") or []:
            reply.append((choice.get("delta") or {}).get("content") or "")
        timings = chunk.get("timings") or timings
    return ttft, timings, "".join(reply)


def probe(pod, tokenizer_port=None, seed=7, repeats=REPEATS, log=print):
    """Measures one idle llama-server (`pod`: harness.LlamaServer, parallel >= 2). Returns the raw samples and the
    fitted calibration {"prefill", "decode", "client_overhead_ms" (median), "client_overhead_fixed_ms" and
    "client_overhead_per_1k_tokens_ms" (its line against the prompt's size),
    "llama_per_sim_token", "bytes_per_llama_token", "isolated_slowdown" (busy wall / CPU seconds of the pod while
    probed), "samples"}."""
    samples = {"prefill": [], "overhead": [], "decode": {}}
    _stream(pod, [{"role": "user", "content": "warm up"}], 4)
    spans, cpu_before = [], process_cpu_seconds(pod.proc.pid)

    def stream(messages, max_tokens):
        return _stream(pod, messages, max_tokens, spans)

    for rep in range(repeats):
        for words in PREFILL_WORDS:
            text = english(("calibrate-cold", seed, rep, words), words)
            ttft, t, _ = stream([{"role": "user", "content": text}], 1)
            samples["prefill"].append((t["prompt_n"], t["cache_n"], t["prompt_ms"]))
            samples["overhead"].append((t["prompt_n"] + t["cache_n"], ttft - t["prompt_ms"]))
        prefix = english(("calibrate-prefix", seed, rep), 1100)
        stream([{"role": "user", "content": prefix}], 1)
        # The first request after a slot's cold prefill reuses it at about half the cost of the later ones (measured
        # on this llama-server: 22-29 ms against 55-80 ms for ~60 new tokens after ~1,250 cached); a workload's warm
        # requests are mostly the later kind: one goes unmeasured first, and a run of question-sized ones is measured.
        stream([{"role": "user", "content": prefix + " " + english(("calibrate-settle", seed, rep), 12)}], 1)
        for i, words in enumerate(SUFFIX_WORDS + (STEADY_WORDS,) * STEADY_REPEATS):
            suffix = english(("calibrate-suffix", seed, rep, words, i), words)
            ttft, t, _ = stream([{"role": "user", "content": prefix + " " + suffix}], 1)
            samples["prefill"].append((t["prompt_n"], t["cache_n"], t["prompt_ms"]))
            samples["overhead"].append((t["prompt_n"] + t["cache_n"], ttft - t["prompt_ms"]))
    cold, warm = split_cold(samples["prefill"])
    prefill = fit_prefill(cold)
    context = fit_context_attention(prefill, warm)
    prefill |= {"context_attention_ms_per_m_pairs": context["context_attention_ms_per_m_pairs"],
                "warm_n": context["n"], "warm_rms_ms": context["rms_ms"]}
    log(f"prefill: {prefill['tokens_per_s']:.0f} tokens/s, {prefill['overhead_ms']:.2f} ms fixed, "
        f"{prefill['attention_ms_per_m_pairs']:.3f} ms per 1e6 pairs (rms {prefill['rms_ms']:.2f} ms, "
        f"{prefill['n']} cold samples); after a cached prefix {context['context_attention_ms_per_m_pairs'] or 0:.1f} ms "
        f"per 1e6 (new, cached) pairs (median of {context['n']} warm samples, rms {context['rms_ms'] or 0:.1f} ms)")

    def step_ms(t):
        return t["predicted_ms"] / max(1, t["predicted_n"] - 1)

    decode = {"short": [], "long": [], "double": []}
    for rep in range(repeats):
        short = english(("calibrate-decode-short", seed, rep), 60)
        _, t, _ = stream([{"role": "user", "content": short}], 64)
        decode["short"].append((step_ms(t), t["prompt_n"] + t["cache_n"] + 32))
        long_text = english(("calibrate-decode-long", seed, rep), 2200)
        _, t, _ = stream([{"role": "user", "content": long_text}], 64)
        decode["long"].append((step_ms(t), t["prompt_n"] + t["cache_n"] + 32))
        texts = [english(("calibrate-decode-double", seed, rep, i), 60) for i in range(2)]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            both = list(pool.map(lambda s: stream([{"role": "user", "content": s}], 128), texts))
        decode["double"].append((statistics.mean(step_ms(t) for _, t, _ in both),
                                 statistics.mean(t["prompt_n"] + t["cache_n"] + 64 for _, t, _ in both)))

    def med(rows):
        return (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))

    samples["decode"] = decode
    dec = fit_decode(med(decode["short"]), med(decode["long"]), med(decode["double"]))
    log(f"decode: {dec['floor_ms']:.3f} ms per step + {dec['per_seq_ms']:.3f} ms per sequence + "
        f"{dec['attention_ms_per_1k']:.3f} ms per 1,000 tokens of context")
    cpu = (process_cpu_seconds(pod.proc.pid) or 0.0) - (cpu_before or 0.0)
    busy = sum(busy_seconds([_Span(a, b) for a, b in spans]).values())
    overhead = [ms for _, ms in samples["overhead"]]
    slope = least_squares([(1.0, n / 1000.0) for n, _ in samples["overhead"]], overhead) or [0.0, 0.0]
    # Tokens: llama's per simulator token on the benchmark's prose.
    port = tokenizer_port or pod.port
    text = english(("calibrate-ratio", seed), 3000)
    status, _, data = request("127.0.0.1", port, "POST", "/tokenize",
                              json.dumps({"content": text, "add_special": False, "parse_special": True}))
    llama_tokens = len(json.loads(data)["tokens"]) if status == 200 else None
    ratio = llama_tokens / len(text_tokens(text)) if llama_tokens else 1.0
    cal = {"prefill": prefill, "decode": dec, "client_overhead_ms": statistics.median(overhead),
           "client_overhead_fixed_ms": slope[0], "client_overhead_per_1k_tokens_ms": slope[1],
           "llama_per_sim_token": ratio,
           "bytes_per_llama_token": len(text.encode()) / llama_tokens if llama_tokens else None,
           "isolated_slowdown": slowdown([busy], [cpu]), "samples": samples}
    log(f"client overhead (TTFT - prompt_ms): median {cal['client_overhead_ms']:.2f} ms "
        f"({slope[1]:.2f} ms more per 1,000 prompt tokens); {ratio:.3f} llama tokens per simulator token "
        f"({cal['bytes_per_llama_token']:.2f} bytes per llama token); busy {busy:.2f} s on {cpu:.2f} CPU s "
        f"(slowdown alone {cal['isolated_slowdown'] or float('nan'):.2f})")
    return cal


WORKLOAD_PROBE_SEED = 1000   # a workload's own requests for probe_workload: a seed no benchmark run draws
WORKLOAD_PROBE_DEADLINE_S = 300.0


def _one_at_a_time(port, workload):
    """The workload's requests one at a time straight to a pod: {rid: (new, cached, prompt_ms)} of the answers with
    timings, and the wall seconds."""
    from dataclasses import replace

    from bench.loadgen import run_workload
    records, wall, _ = run_workload("127.0.0.1", port, replace(workload, concurrency=1), 1.0,
                                    WORKLOAD_PROBE_DEADLINE_S, progress=False, capture=True,
                                    request_timeout_s=120.0)
    failed = [r for r in records if not r.ok]
    if failed:
        raise RuntimeError(f"workload probe ({workload.name}): {len(failed)} of {len(records)} requests failed")
    return {r.rid: (r.timings["prompt_n"], r.timings["cache_n"], r.timings["prompt_ms"]) for r in records
            if (r.timings or {}).get("prompt_n") and r.timings.get("prompt_ms") is not None}, wall


def workload_slices(workload, parts):
    """The workload cut into at most `parts` consecutive slices of its sessions (each a Workload; none empty), to
    send one at a time between other work: one pod keeps its cache from slice to slice, so a session's turns find
    the earlier ones cached as they would all at once."""
    from dataclasses import replace
    sessions = workload.sessions
    parts = max(1, min(parts, len(sessions)))
    bounds = [round(i * len(sessions) / parts) for i in range(parts + 1)]
    return [replace(workload, sessions=sessions[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def probe_workload(pod, workload, prefill, log=print):
    """The context attention of one workload: its requests (as built, with its replies carried) one at a time
    straight to `pod` (one llama-server alone, started with the workload's flags). Returns
    {"samples": [(new, cached, prompt_ms)] of its warm prompts, "by_rid": {rid: sample} of every answer,
    "requests": sent, **fit_context_attention}."""
    by_rid, wall = _one_at_a_time(pod.port, workload)
    return fit_workload_probe(workload.name, by_rid, wall, prefill, log)


def fit_workload_probe(name, by_rid, wall, prefill, log=print):
    """probe_workload's fit of the answers {rid: (new, cached, prompt_ms)} however they were sent."""
    _, warm = split_cold(list(by_rid.values()))
    fit = fit_context_attention(prefill, warm)
    log(f"{name}: {len(by_rid)} requests one at a time in {wall:.1f} s, {fit['n']} warm: "
        f"{fit['context_attention_ms_per_m_pairs'] or 0:.1f} ms per 1e6 (new, cached) pairs "
        f"(rms {fit['rms_ms'] or 0:.1f} ms, median error {100 * (fit['median_error'] or 0):+.0f} %)")
    return {"samples": warm, "by_rid": by_rid, "requests": len(by_rid), **fit}


def fit_sim_context_min_rows(llama_by_rid, sim_by_rid, overhead_ms, pair_ms, max_rows=4096):
    """The simulator's own --context-min-rows for a workload, in its tokens: {rid: (new, cached, prompt_ms)} of the
    same requests one at a time on llama-server and on a simulated pod without the option (its context pairs at
    the prefill coefficient `pair_ms`, ms per 1e6 simulator-token pairs) -> {"sim_context_min_rows": N, "sim_n":
    requests used, "sim_rms_ms": the fit's rms} (warm on both: more than the template's tokens cached).
    The simulator's step pays the client overhead (`overhead_ms`, H in --step-overhead-ms) that llama-server's
    prompt_ms leaves out, so a request's time still unexplained is U = llama prompt_ms + H - simulated prompt_ms,
    and with the option a thin request (new < N) pays cached x (N - new) pairs more. N minimises the sum of |U -
    that padding| over the requests (integers 0 .. max_rows; the smallest of equals): the short questions after a
    long cached prefix set it, a long turn after a short cached system prompt (new > N) pays only its own pairs,
    as llama.cpp's wide batches do, which one coefficient per pair for every request could not (it charged such a
    turn 2-3x llama's time). None without a pair."""
    pairs = []
    for rid, (new, cached, ms) in llama_by_rid.items():
        sim = sim_by_rid.get(rid)
        if cached <= COLD_CACHED_MAX or sim is None or sim[0] <= 0 or sim[1] <= COLD_CACHED_MAX:
            continue
        pairs.append((sim[0], sim[1], ms + overhead_ms - sim[2]))
    if not pairs or pair_ms <= 0:
        return {"sim_context_min_rows": None, "sim_n": len(pairs), "sim_rms_ms": None}

    def residuals(rows):
        return [u - pair_ms * cached * max(0, rows - new) / 1e6 for new, cached, u in pairs]

    best = min(range(max_rows + 1), key=lambda rows: (sum(abs(e) for e in residuals(rows)), rows))
    rms = math.sqrt(sum(e * e for e in residuals(best)) / len(pairs))
    return {"sim_context_min_rows": best, "sim_n": len(pairs), "sim_rms_ms": rms}


def probe_workload_sim(port, workload, llama_by_rid, overhead_ms, pair_ms, log=print):
    """The workload's requests one at a time on one simulated pod (port) without --context-min-rows (its context
    pairs at `pair_ms`, its --prefill-attention-ms-per-m-pairs): fit_sim_context_min_rows against the llama
    probe's answers."""
    sim_by_rid, wall = _one_at_a_time(port, workload)
    fit = fit_sim_context_min_rows(llama_by_rid, sim_by_rid, overhead_ms, pair_ms)
    log(f"{workload.name}: the same on one simulated pod in {wall:.1f} s: {fit['sim_n']} warm on both, "
        f"--context-min-rows {fit['sim_context_min_rows']} (rms {fit['sim_rms_ms'] or 0:.1f} ms)")
    return fit


CONTENTION_WORDS = 1100   # about 1,500 Llama tokens: a shared-prefix group's cold prompt
CONTENTION_DECODE_TOKENS = 64


def contention_round(pool, pods, samples, seed, rep, cal=None):
    """One round of the contention probe (`pool`: a thread pool of len(pods) workers): for k = 1 .. len(pods), k
    pods at once each prefill a fresh ~1,500-token prompt (`max_tokens` 1), then k at once each decode 64 tokens
    after a short one; appends the prompt_ms and the decode step's ms to samples["prefill"][k] and
    samples["decode"][k]. With a calibration `cal`, the lone pod's (k = 1) times over what `cal` predicts for them
    go to samples["alone"]["prefill"] and ["decode"]: how fast the machine is now against the calibration."""
    for k in range(1, len(pods) + 1):
        texts = [english(("contention-cold", seed, rep, k, i), CONTENTION_WORDS) for i in range(k)]
        got = list(pool.map(lambda a: _stream(a[0], [{"role": "user", "content": a[1]}], 1), zip(pods[:k], texts)))
        samples["prefill"].setdefault(k, []).extend(t["prompt_ms"] for _, t, _ in got)
        if cal is not None and k == 1:
            t = got[0][1]
            samples.setdefault("alone", {}).setdefault("prefill", []).append(
                t["prompt_ms"] / prefill_ms(cal["prefill"], t["prompt_n"], t.get("cache_n", 0)))
        texts = [english(("contention-decode", seed, rep, k, i), 40) for i in range(k)]
        got = list(pool.map(lambda a: _stream(a[0], [{"role": "user", "content": a[1]}], CONTENTION_DECODE_TOKENS),
                            zip(pods[:k], texts)))
        samples["decode"].setdefault(k, []).extend(t["predicted_ms"] / max(1, t["predicted_n"] - 1) for _, t, _ in got)
        if cal is not None and k == 1:
            t = got[0][1]
            steps = max(1, t["predicted_n"] - 1)
            context = t["prompt_n"] + t.get("cache_n", 0) + steps / 2
            samples.setdefault("alone", {}).setdefault("decode", []).append(
                t["predicted_ms"] / steps / decode_step_ms(cal["decode"], context))


def probe_contention(pods, seed=7, repeats=REPEATS, log=print):
    """Measures how the pods of one machine slow each other down (`pods`: idle harness.LlamaServers, the fleet the
    benchmark runs, each -t 1): `repeats` rounds of contention_round. Returns {"prefill": the slowdown table
    (fit_contention of the prompt_ms), "decode": the same of the decode step's ms, "samples": {"prefill": {k:
    [ms]}, "decode": {k: [ms]}}}. The simulator's --shared-cpu-slowdown is "prefill": what sets TTFT (a decode
    step's slowdown is reported beside it)."""
    samples = {"prefill": {}, "decode": {}}
    with concurrent.futures.ThreadPoolExecutor(len(pods)) as pool:
        list(pool.map(lambda pod: _stream(pod, [{"role": "user", "content": "warm up"}], 4), pods))
        for rep in range(repeats):
            contention_round(pool, pods, samples, seed, rep)
    out = {"prefill": fit_contention(samples["prefill"]), "decode": fit_contention(samples["decode"]),
           "samples": samples}
    log("contention: " + ", ".join(f"{k} busy: prefill x{p:.2f}, decode x{d:.2f}"
                                   for k, (p, d) in enumerate(zip(out["prefill"], out["decode"]), start=1)))
    return out


def fit_in_run(samples):
    """The contention probe spread over a workload's real runs (a round after each: contention_round with the
    calibration) -> {"prefill", "decode": the slowdown tables (fit_contention), "drift": {"prefill", "decode": the
    median lone-pod time over the calibration's prediction}, "rounds": rounds, "samples": samples}. The machine's
    speed and its pods' contention change by 10-20 % within minutes (cold prefill 7,400 to 10,600 tokens/s in one
    day's calibrations; 4 pods prefilling at once x1.95 in one probe, x2.35 in another, while the runs' own cold
    prompts slowed about alike in both), so the ones that stand for the runs are measured between them."""
    alone = samples.get("alone") or {}
    return {"prefill": fit_contention(samples["prefill"]), "decode": fit_contention(samples["decode"]),
            "drift": {"prefill": statistics.median(alone["prefill"]) if alone.get("prefill") else 1.0,
                      "decode": statistics.median(alone["decode"]) if alone.get("decode") else 1.0},
            "rounds": len(samples["prefill"].get(1, [])), "samples": samples}


def with_in_run(cal, in_run):
    """The calibration as the machine was during a workload's real runs (`in_run`: fit_in_run): its prefill and
    client overhead slowed by the drift's prefill factor and its decode by the decode one (scaled), and the in-run
    slowdown table as its contention probe (what shared_cpu_flags gives)."""
    return {**scaled(cal, in_run["drift"]),
            "contention_probe": {"prefill": in_run["prefill"], "decode": in_run["decode"]}}


class _Span:
    """A probe request as busy_seconds reads records."""

    def __init__(self, start, end):
        self.send_s, self.end_s, self.ok, self.pod = start, end, True, "calibration"
