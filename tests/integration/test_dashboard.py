"""The Grafana dashboard of the Helm chart (helm/prefixgate/dashboards/prefixgate.json) cannot rot: every series its
PromQL expressions (panels and template variables) name is one a real gateway exports, read from the live /metrics
of gateways that served traffic with the features the panels show switched on (prefix-cache routing with the
prediction audit, KV event sync, state sync between two replicas through a real Redis, flow control that queued and
shed). The extractor that reads the expressions is checked on its own, including that a panel naming a series no
gateway exports is reported."""
import json
import re
from concurrent.futures import ThreadPoolExecutor

from harness import Gateway, RedisServer, Sim, wait_until
from test_deploy_files import CHART

DASHBOARD = CHART / "dashboards" / "prefixgate.json"

# PromQL words that are not series names (keywords, aggregation modifiers, literals).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
            "inf", "nan", "atan2"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{[^}]*\})?\s*,")


def series_names(expr):
    """The metric names a PromQL expression selects: strings (label values), label matchers, ranges and grouping
    clauses removed, then every identifier that is not a function call or a keyword. Grafana's `$variables` only
    appear inside strings and ranges."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def variable_series(query):
    """The series a template variable's query reads: label_values(<series>, <label>) names one; a plain PromQL query
    (query_result(...) aside) is read like a panel's."""
    text = query.get("query", "") if isinstance(query, dict) else query or ""
    match = _LABEL_VALUES.match(text)
    if match:
        return {match.group(1)}
    if text.startswith("label_values(") or text.startswith("label_names("):
        return set()  # label_values(<label>) and label_names() name no series
    return series_names(text.removeprefix("query_result(").removesuffix(")")) if text else set()


def dashboard_expressions(dashboard):
    """(where, expression) of every panel target (rows' nested panels included) and of every query variable."""
    out = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                out.append((f"panel {panel.get('title')!r} target {target.get('refId')}", target.get("expr", "")))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            out.append((f"variable ${variable['name']}", variable.get("query")))
    return out


def missing_series(dashboard, exported):
    """Every (where, series) the dashboard names that `exported` lacks, and every expression naming no series."""
    problems = []
    for where, expr in dashboard_expressions(dashboard):
        names = variable_series(expr) if where.startswith("variable") else series_names(expr)
        if not names:
            problems.append((where, "<no series in the expression>"))
        problems += [(where, name) for name in sorted(names - exported)]
    return problems


def exported_names(metrics_text):
    """The sample names of a Prometheus text exposition, and for each family its `# TYPE` declares, the names its
    samples carry (histograms and summaries: _bucket, _sum, _count). prometheus-cpp leaves out a family without
    samples altogether, so a declared family is one the gateway writes (its own request families are declared before
    the first request)."""
    names = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ", 3)
            names.add(family)
            if kind in ("histogram", "summary"):
                names |= {f"{family}_bucket", f"{family}_sum", f"{family}_count"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


# ---------------------------------------------------------------------------------------------------------------
# the extractor, on its own
# ---------------------------------------------------------------------------------------------------------------
def test_the_extractor_reads_series_names_out_of_promql():
    """Functions, keywords, label matchers (values with spaces, braces and parentheses), ranges, offsets and
    grouping clauses are stripped; histograms' _bucket series are kept as written."""
    cases = {
        'histogram_quantile(0.99, sum by (model, le) (rate(prefixgate_time_to_first_byte_seconds_bucket'
        '{model=~"$model"}[$__rate_interval])))': {"prefixgate_time_to_first_byte_seconds_bucket"},
        'sum by (model) (rate(a_total{status=~"5.."}[5m])) / sum by (model) (rate(b_total[5m]))':
            {"a_total", "b_total"},
        'max(prefixgate_pods{state="ready"}) or vector(0)': {"prefixgate_pods"},
        "sum without (pod) (rate(x_total[5m] offset 1h)) > bool 0": {"x_total"},
        'sum(rate(c_total{reason="a (b) {c}"}[1m:10s])) by (reason)': {"c_total"},
        "min by (pod) (prefixgate_pod_ready) * on (pod) group_left (model) info_metric": {"prefixgate_pod_ready",
                                                                                             "info_metric"},
        "1e3 * rate(d_seconds_sum[5m]) / rate(d_seconds_count[5m])": {"d_seconds_sum", "d_seconds_count"},
    }
    for expr, expected in cases.items():
        assert series_names(expr) == expected, expr
    assert variable_series({"query": "label_values(prefixgate_requests_total, model)"}) == {"prefixgate_requests_total"}
    assert variable_series("label_values(model)") == set()


def test_a_panel_naming_a_series_the_gateway_does_not_export_is_reported():
    """The check fails for a misspelt or invented series (a histogram's _buckets, an unknown counter) and for an
    expression from which no series can be read, and passes for exported ones."""
    exported = exported_names("# TYPE prefixgate_request_duration_seconds histogram\n"
                              'prefixgate_request_duration_seconds_bucket{le="+Inf"} 1\n'
                              "# TYPE prefixgate_requests_total counter\n"
                              'prefixgate_requests_total{model="m"} 3\n')
    dashboard = {"panels": [{"type": "row", "title": "r", "panels": [
        {"title": "ok", "targets": [{"refId": "A", "expr": "sum(rate(prefixgate_requests_total[5m]))"}]},
        {"title": "typo", "targets": [
            {"refId": "A", "expr": "histogram_quantile(0.9, rate(prefixgate_request_duration_seconds_buckets[5m]))"}]},
        {"title": "invented", "targets": [{"refId": "B", "expr": "rate(prefixgate_no_such_total[5m])"}]},
        {"title": "empty", "targets": [{"refId": "C", "expr": "vector(1)"}]}]}],
        "templating": {"list": [{"type": "query", "name": "model",
                                 "query": "label_values(prefixgate_model_info, model)"}]}}
    assert missing_series(dashboard, exported) == [
        ("panel 'typo' target A", "prefixgate_request_duration_seconds_buckets"),
        ("panel 'invented' target B", "prefixgate_no_such_total"),
        ("panel 'empty' target C", "<no series in the expression>"),
        ("variable $model", "prefixgate_model_info"),
    ]
    assert "prefixgate_request_duration_seconds_sum" in exported  # a declared histogram's series


def test_the_dashboard_is_grafana_json_with_queries_in_every_panel():
    """The file parses, has a uid and title, a Prometheus datasource variable every panel uses, and at least one
    PromQL expression in every panel that is not a row."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]


# ---------------------------------------------------------------------------------------------------------------
# against live gateways
# ---------------------------------------------------------------------------------------------------------------
def chat_body(content, max_tokens=2):
    return json.dumps({"model": "sim-model", "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": content}]})


def post(gw, content, max_tokens=2, headers=None):
    return gw.call("POST", "/v1/chat/completions", chat_body(content, max_tokens), headers)


def prompt(topic):
    return f"{topic}: " + " ".join(f"{topic}-{i} clause" for i in range(80))


def queued(gw):
    return json.loads(gw.admin("GET", "/debug/queues")[2])["models"].get("sim-model", {}).get("queued", 0)


def test_every_series_the_dashboard_queries_is_exported_by_a_live_gateway(tmp_path):
    """Two state-synced replicas with flow control in front of a real-time pod (one request held, one queued, one
    shed for its TTFT objective) and a KV-event gateway in front of two publishing pods serve traffic; the union of
    their /metrics has every series the dashboard names."""
    redis = RedisServer(tmp_path)
    slow = Sim(tmp_path, "slow", time_scale="1")  # real time: a 400-token answer holds the pod about 2 s
    kv_pods = [Sim(tmp_path, f"kv-{i}", kv_events=True) for i in range(2)]
    gateways = []
    try:
        flow = {"enabled": True, "max_in_flight_per_pod": 1, "classes": [{"name": "interactive"}, {"name": "batch"}],
                "default_class": "batch"}
        synced = {"routing": {"strategy": "prefix-cache"}, "state_sync": {"enabled": True, "redis": redis.url},
                  "flow_control": flow}
        a = Gateway(tmp_path, [slow], config=synced, name="replica-a")
        gateways.append(a)
        b = Gateway(tmp_path, [slow], config=synced, name="replica-b")
        gateways.append(b)
        kv = Gateway(tmp_path, kv_pods, name="kv-gateway",
                     config={"routing": {"strategy": "prefix-cache", "prefix_cache": {"kv_event_sync": True}}})
        gateways.append(kv)

        for gw in (a, kv):
            for _ in range(2):  # the second finds the first's prefix: a match, and an audited prediction
                assert post(gw, prompt("warm"))[0] == 200
        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(post, a, prompt("hold"), 400)
            wait_until(lambda: a.debug_pods()[0]["in_flight"] == 1, what="the pod held")
            waiting = pool.submit(post, a, prompt("queued"))
            wait_until(lambda: queued(a) == 1, what="a request queued")
            status, _, raw = post(a, prompt("hurry"), headers={"x-slo-ttft-ms": "100"})
            assert status == 503, raw  # shed: its objective passes while the pod is held
            assert held.result(timeout=30)[0] == 200 and waiting.result(timeout=30)[0] == 200
        wait_until(lambda: b.metric("prefixgate_state_sync_lag_seconds_count") >= 1, timeout=5,
                   what="replica B applying A's records")
        wait_until(lambda: kv.metric("prefixgate_kv_events_lag_distribution_seconds_count") >= 1, timeout=5,
                   what="KV events applied")
        wait_until(lambda: a.metric("prefixgate_flow_queue_wait_seconds_count") >= 1, timeout=5,
                   what="the queued request's wait counted")

        exported = set()
        for gw in gateways:
            exported |= exported_names(gw.metrics_text())
        dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        assert len(dashboard_expressions(dashboard)) >= 20
        assert missing_series(dashboard, exported) == []
    finally:
        for gw in gateways:
            gw.stop()
        for sim in [slow, *kv_pods]:
            sim.stop()
        redis.stop()
