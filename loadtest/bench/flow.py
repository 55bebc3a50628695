"""The flow-control figures of issue 27 (docs/benchmarks.md, "Flow control (issue 27)"): per tenant, per priority
class and per objective, from one run's records; their mean ± 95 % CI over seeds; the Markdown tables and the
targets' verdicts. Pure functions (no I/O).

Definitions (also in the report):
- outcome of a request: `answered` (HTTP 200 and a complete stream), `shed` (429 or 503 with an OpenAI-shaped error
  body, `{"error": {"code": <status>, "type", "message"}}`: a clear refusal the client can act on; the reason is
  told by the message, REASON_PHRASES), else `lost` (no response, a connection error, a
  timeout, a broken stream, or any other status: must be 0);
- TTFT percentiles over the answered requests only;
- objective met: answered with TTFT <= its objective (x-slo-ttft-ms, or its class's); attainment = met / ALL sent
  (a shed or lost request counts as not met), and met / answered beside it;
- goodput = requests meeting their objective per second of the workload's arrival window (the last scheduled
  arrival; the same denominator for flow off and on, so their ratio is the ratio of requests met);
- tokens served = prompt + output tokens (the engines' usage) of the answered requests; Jain's index over the
  tenants of their tokens served, (sum x)^2 / (n sum x^2), 1 = equal; and of tokens served / tokens demanded
  (prompt + max_tokens of every request the tenant sent), 1 = every tenant got the same share of what it asked.
"""
import math
from collections import Counter

from bench.aggregate import mean_ci
from bench.docs_block import replace_block
from bench.stats import percentile

ANSWERED, SHED, LOST = "answered", "shed", "lost"
SHED_STATUSES = (429, 503)
# Issue 27's targets.
NOISY_TTFT_FACTOR = 1.5          # the steady tenant's TTFT p90 with the flood, flow on, within this x its figure alone
HIGH_ATTAINMENT = 0.95           # priority-overload, flow on: share of high-priority requests meeting their objective
GOODPUT_GAIN = 1.3               # mixed-objectives: goodput with flow on / today's
DOCS_BEGIN, DOCS_END = "<!-- flow-control:begin -->", "<!-- flow-control:end -->"
GROUP_FIELDS = ["sent", "answered", "shed", "lost", "met", "ttft_p50", "ttft_p90", "attainment",
                "attainment_answered", "goodput_rps", "tokens_served", "tokens_demanded"]


# prefixgate's error body carries the HTTP status as `code` and OpenAI's `type`; the reason (its metric label,
# src/openai/errors.cpp) is told by the message (src/server/flow_gate.cpp, src/server/request_preparation.cpp).
REASON_PHRASES = [("past its TTFT objective", "queue_timeout (objective)"),
                  ("cannot meet its TTFT objective", "objective_unreachable"),
                  ("max_wait_ms", "queue_timeout (max_wait_ms)"),
                  ("max_queued_per_tenant", "tenant_queue_full"),
                  ("flow-control queue is full", "queue_full")]


def outcome(rec):
    """ANSWERED, SHED or LOST (see the module docstring); None (never sent) is LOST."""
    if rec is None:
        return LOST
    if rec.ok:
        return ANSWERED
    if rec.status in SHED_STATUSES and rec.error_type:
        return SHED
    return LOST


def shed_reason(rec):
    """'429 tenant_queue_full' / '503 queue_timeout (objective)': a shed request's status and reason (from its
    message; else its error type, e.g. '429 rate_limit_error')."""
    reason = next((label for phrase, label in REASON_PHRASES if phrase in rec.error_message), rec.error_type)
    return f"{rec.status} {reason}"


def met_objective(req, rec):
    """Whether the request was answered within its objective (an answered request without one meets it)."""
    if outcome(rec) != ANSWERED or rec.ttft_s < 0:
        return False
    return not req.slo_ttft_ms or rec.ttft_s * 1000.0 <= req.slo_ttft_ms


def jain(values):
    """Jain's fairness index (sum x)^2 / (n sum x^2) of non-negative values: 1 when all equal, 1/n when one has
    everything; NaN without values or when all are 0."""
    values = list(values)
    square = sum(v * v for v in values)
    if not values or square == 0:
        return float("nan")
    return sum(values) ** 2 / (len(values) * square)


def group_figures(pairs, window_s):
    """The figures of one group of requests: pairs = [(BenchRequest, Record or None)]."""
    outcomes = [outcome(rec) for _, rec in pairs]
    answered = [(req, rec) for (req, rec), o in zip(pairs, outcomes) if o == ANSWERED]
    ttfts = [rec.ttft_s for _, rec in answered if rec.ttft_s >= 0]
    met = sum(1 for req, rec in answered if met_objective(req, rec))
    sent = len(pairs)
    return {
        "sent": sent, "answered": len(answered), "shed": outcomes.count(SHED), "lost": outcomes.count(LOST),
        "met": met,
        "ttft_p50": percentile(ttfts, 50), "ttft_p90": percentile(ttfts, 90),
        "attainment": met / sent if sent else float("nan"),
        "attainment_answered": met / len(answered) if answered else float("nan"),
        "goodput_rps": met / window_s if window_s > 0 else float("nan"),
        "tokens_served": sum(rec.prompt_tokens + rec.completion_tokens for _, rec in answered),
        "tokens_demanded": sum(req.prompt_tokens + req.max_tokens for req, _ in pairs),
    }


def class_of(req):
    return req.priority or "default"


def flow_row(records, requests_by_rid):
    """One run's flow figures: {"window_s", "all", "tenants": {tenant: figures}, "classes": {class: figures},
    "objectives": {"<ms> ms": figures}, "shed_reasons": {"429 tenant_queue_full": n}, "lost": n, "lost_kinds":
    {what: n}, "jain_tokens", "jain_tokens_per_demand"}; every request of the workload counts (one never sent, at the
    run's deadline, is lost)."""
    by_rid = {rec.rid: rec for rec in records}
    requests = sorted(requests_by_rid.values(), key=lambda r: r.rid)
    pairs = [(req, by_rid.get(req.rid)) for req in requests]
    window = max((req.at_s for req in requests), default=0.0)

    def grouped(key):
        groups = {}
        for req, rec in pairs:
            groups.setdefault(key(req), []).append((req, rec))
        return {name: group_figures(members, window) for name, members in sorted(groups.items())}

    tenants = grouped(lambda req: req.tenant or "_default")
    objectives = grouped(lambda req: req.slo_ttft_ms)
    shed = Counter(shed_reason(rec) for _, rec in pairs if outcome(rec) == SHED)
    lost = Counter(("never sent" if rec is None else (rec.error or f"HTTP {rec.status}")[:60])
                   for _, rec in pairs if outcome(rec) == LOST)
    return {
        "window_s": window,
        "all": group_figures(pairs, window),
        "tenants": tenants,
        "classes": grouped(class_of),
        "objectives": {f"{ms} ms" if ms else "none": figures for ms, figures in objectives.items()},
        "shed_reasons": dict(sorted(shed.items())),
        "lost": sum(lost.values()),
        "lost_kinds": dict(lost.most_common(5)),
        "jain_tokens": jain(t["tokens_served"] for t in tenants.values()),
        "jain_tokens_per_demand": jain(t["tokens_served"] / t["tokens_demanded"] for t in tenants.values()
                                       if t["tokens_demanded"]),
    }


def flatten(flow):
    """{"all.ttft_p90": x, "tenants.steady.attainment": y, "shed_reasons.503 queue_timeout": n, "lost": n, ...}: the
    numbers of a flow_row, by path."""
    out = {}
    for key in ("all",):
        out.update({f"all.{k}": v for k, v in flow[key].items()})
    for section in ("tenants", "classes", "objectives"):
        for name, figures in flow[section].items():
            out.update({f"{section}.{name}.{k}": v for k, v in figures.items()})
    out.update({f"shed_reasons.{k}": v for k, v in flow["shed_reasons"].items()})
    for key in ("lost", "jain_tokens", "jain_tokens_per_demand", "window_s"):
        out[key] = flow[key]
    return out


def flow_aggregate(rows, strategies):
    """{strategy: {"seeds": valid seeds, "flow_control": on?, "figures": {path: [mean, half-width, n]},
    "lost_total": lost over every run (valid or not)}} over the valid runs' `flow` figures. A shed reason missing
    from a run counts 0 there."""
    out = {}
    for name in strategies:
        mine = [r for r in rows if r["strategy"] == name and "flow" in r]
        valid = [r for r in mine if r["valid"]]
        flats = [flatten(r["flow"]) for r in valid]
        reasons = {k for f in flats for k in f if k.startswith("shed_reasons.")}
        keys = list(dict.fromkeys(k for f in flats for k in f))
        figures = {k: list(mean_ci([f.get(k, 0 if k in reasons else None) for f in flats])) for k in keys}
        out[name] = {"seeds": sorted(r["seed"] for r in valid),
                     "flow_control": any(r.get("flow_control") for r in mine),
                     "figures": figures, "lost_total": sum(r["flow"]["lost"] for r in mine)}
    return out


def _value(agg, key):
    stat = agg["figures"].get(key)
    return stat[0] if stat and stat[2] else float("nan")


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def _pm(stat, fmt):
    """'mean ± half-width' ('-' without a value): fmt pct (x100, %), sec (3 decimals), num0, num2."""
    if not stat or not stat[2] or not _finite(stat[0]):
        return "-"
    mean, half = stat[0], stat[1]
    scale, digits, unit = {"pct": (100.0, 1, " %"), "sec": (1.0, 3, ""), "num0": (1.0, 0, ""),
                           "num2": (1.0, 2, ""), "num3": (1.0, 3, "")}[fmt]
    text = f"{mean * scale:.{digits}f}"
    if _finite(half):
        text += f" ± {half * scale:.{digits}f}"
    return text + unit


GROUP_COLUMNS = [("sent", "sent", "num0"), ("answered", "answered", "num0"), ("shed", "shed", "num0"),
                 ("lost", "lost", "num0"), ("ttft_p50", "TTFT p50 s", "sec"), ("ttft_p90", "TTFT p90 s", "sec"),
                 ("attainment", "objective met / sent", "pct"),
                 ("attainment_answered", "met / answered", "pct"), ("goodput_rps", "goodput req/s", "num2"),
                 ("tokens_served", "tokens served", "num0")]


def _groups(aggregates, section):
    names = []
    for agg in aggregates.values():
        for key in agg["figures"]:
            if key.startswith(section + "."):
                name = key[len(section) + 1:].rsplit(".", 1)[0]
                if name not in names:
                    names.append(name)
    return names


def _label(name, agg):
    return f"{name} ({'flow on' if agg['flow_control'] else 'flow off'})"


def groups_table(aggregates):
    """One row per (group, strategy): the whole run, then each tenant, class and objective."""
    head = "| group | strategy | seeds | " + " | ".join(t for _, t, _ in GROUP_COLUMNS) + " |"
    lines = [head, "| --- " * (len(GROUP_COLUMNS) + 3) + "|"]
    groups = [("all", "all")] + [(f"{section}.{name}", f"{section[:-1] if section != 'classes' else 'class'} `{name}`")
                                 for section in ("tenants", "classes", "objectives")
                                 for name in _groups(aggregates, section)]
    for prefix, title in groups:
        for strategy, agg in aggregates.items():
            if f"{prefix}.sent" not in agg["figures"]:
                continue
            cells = [_pm(agg["figures"].get(f"{prefix}.{key}"), fmt) for key, _, fmt in GROUP_COLUMNS]
            lines.append(f"| {title} | {_label(strategy, agg)} | {len(agg['seeds'])} | " + " | ".join(cells) + " |")
    return lines


def shed_table(aggregates):
    """Per strategy: sheds by status and reason, lost, and Jain's indices."""
    reasons = sorted({k for agg in aggregates.values() for k in agg["figures"] if k.startswith("shed_reasons.")})
    head = ("| strategy | " + " | ".join(f"shed {r[len('shed_reasons.'):]}" for r in reasons)
            + " | lost (every run) | Jain, tokens served | Jain, tokens served / demanded |")
    lines = [head, "| --- " * (len(reasons) + 4) + "|"]
    for strategy, agg in aggregates.items():
        # A reason no run of this strategy gave: 0 (its runs counted nothing of it), "-" without a valid run.
        cells = [_pm(agg["figures"].get(r), "num0") if r in agg["figures"] else "0" if agg["seeds"] else "-"
                 for r in reasons]
        lines.append(f"| {_label(strategy, agg)} | " + " | ".join(cells) + f" | {agg['lost_total']} | "
                     f"{_pm(agg['figures'].get('jain_tokens'), 'num3')} | "
                     f"{_pm(agg['figures'].get('jain_tokens_per_demand'), 'num3')} |")
    return lines


def flow_section(workload_name, aggregates):
    """The Markdown of one flow workload's figures (after its usual section)."""
    if not aggregates:
        return []
    return [f"### Flow control figures: {workload_name}", "",
            "Mean ± 95 % CI over the valid seeds. Outcomes: answered (200, full stream), shed (429/503 with an "
            "OpenAI-shaped error body; the reason from its message), lost (anything else: must be 0). TTFT over the "
            "answered requests; objective met = answered with TTFT within its objective, over all sent (a shed "
            "request counts as not met) and over the answered; goodput = requests met per second of the arrival "
            "window; tokens served = prompt + output tokens of the answered requests.", "",
            *groups_table(aggregates), "",
            "Sheds by status and reason (mean per run), requests lost (summed over every run) and Jain's "
            "fairness index over the tenants:", "",
            *shed_table(aggregates), ""]


def _off_on(aggregates):
    """(the first flow-off strategy, [flow-on strategies]) of a workload's aggregates."""
    off = next((s for s, a in aggregates.items() if not a["flow_control"]), None)
    return off, [s for s, a in aggregates.items() if a["flow_control"]]


def _fmt_s(x):
    return f"{x:.3f} s" if _finite(x) else "-"


def _fmt_pct(x):
    return f"{x * 100:.1f} %" if _finite(x) else "-"


def target_rows(flow_aggs):
    """Issue 27's targets, one row per (target, flow-on strategy): {"workload", "target", "today", "alone",
    "on_strategy", "flow_on", "met": True/False/None}. flow_aggs = {workload: flow_aggregate(...)}."""
    rows = []
    noisy, alone = flow_aggs.get("noisy-neighbour"), flow_aggs.get("noisy-neighbour-alone")
    if noisy:
        off, ons = _off_on(noisy)
        alone_p90 = float("nan")
        if alone:
            alone_off, _ = _off_on(alone)
            alone_p90 = _value(alone[alone_off or next(iter(alone))], "tenants.steady.ttft_p90")
        for on in ons:
            value = _value(noisy[on], "tenants.steady.ttft_p90")
            met = None if not (_finite(value) and _finite(alone_p90)) else value <= NOISY_TTFT_FACTOR * alone_p90
            rows.append({"workload": "noisy-neighbour",
                         "target": f"steady tenant TTFT p90 <= {NOISY_TTFT_FACTOR:g}x its figure alone",
                         "today": _fmt_s(_value(noisy[off], "tenants.steady.ttft_p90")) if off else "-",
                         "alone": _fmt_s(alone_p90), "on_strategy": on, "flow_on": _fmt_s(value), "met": met})
    priority = flow_aggs.get("priority-overload")
    if priority:
        off, ons = _off_on(priority)
        for on in ons:
            value = _value(priority[on], "classes.high.attainment")
            rows.append({"workload": "priority-overload",
                         "target": f">= {HIGH_ATTAINMENT:.0%} of high-priority requests meet their objective",
                         "today": _fmt_pct(_value(priority[off], "classes.high.attainment")) if off else "-",
                         "alone": "", "on_strategy": on, "flow_on": _fmt_pct(value),
                         "met": value >= HIGH_ATTAINMENT if _finite(value) else None})
    mixed = flow_aggs.get("mixed-objectives")
    if mixed:
        off, ons = _off_on(mixed)
        today = _value(mixed[off], "all.goodput_rps") if off else float("nan")
        for on in ons:
            value = _value(mixed[on], "all.goodput_rps")
            ratio = value / today if _finite(value) and _finite(today) and today > 0 else float("nan")
            rows.append({"workload": "mixed-objectives", "target": f"goodput >= {GOODPUT_GAIN:g}x today's",
                         "today": f"{today:.2f} req/s" if _finite(today) else "-", "alone": "", "on_strategy": on,
                         "flow_on": (f"{value:.2f} req/s ({ratio:.2f}x)" if _finite(ratio) else
                                     f"{value:.2f} req/s" if _finite(value) else "-"),
                         "met": ratio >= GOODPUT_GAIN if _finite(ratio) else (True if _finite(value) and value > 0
                                                                              and today == 0 else None)})
    if flow_aggs:
        lost = {w: sum(a["lost_total"] for a in aggs.values()) for w, aggs in flow_aggs.items()}
        rows.append({"workload": ", ".join(flow_aggs), "target": "no request lost (answered or shed with a status)",
                     "today": "", "alone": "", "on_strategy": "every run",
                     "flow_on": ", ".join(f"{w} {n}" for w, n in lost.items()), "met": sum(lost.values()) == 0})
    return rows


def targets_table(flow_aggs):
    rows = target_rows(flow_aggs)
    if not rows:
        return []
    verdict = {True: "yes", False: "**no**", None: "-"}
    lines = ["| workload | target | today (flow off) | alone | flow on | strategy | met |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['workload']} | {r['target']} | {r['today']} | {r['alone']} | {r['flow_on']} | "
              f"{r['on_strategy']} | {verdict[r['met']]} |" for r in rows]
    return lines


def comparison_section(flow_aggs):
    """The report's closing section: flow off vs on against issue 27's targets (mean over the valid seeds)."""
    if not flow_aggs:
        return []
    return ["## Flow control: off (today) vs on, against issue 27's targets", "",
            "Means over the valid seeds (the per-workload tables give the 95 % intervals). \"alone\": the steady "
            "tenant's TTFT p90 in noisy-neighbour-alone with flow off (the same requests without the flood).", "",
            *targets_table(flow_aggs), ""]


def docs_tables(flow_aggs, workload_sections):
    """What goes between DOCS_BEGIN and DOCS_END in docs/benchmarks.md: the targets table, then each workload's
    figures (its flow_section lines)."""
    lines = [*targets_table(flow_aggs), ""]
    for name, section in workload_sections.items():
        lines += [f"**{name}**", "", *section[2:]]   # without the section's own heading
    return lines


def replace_docs(text, generated):
    """`text` with the lines between DOCS_BEGIN and DOCS_END replaced by `generated` (the markers kept)."""
    return replace_block(text, DOCS_BEGIN, DOCS_END, generated)
