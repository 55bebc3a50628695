"""Editing a pod's entry in the pods file: a pod is its name and address, so an edit of anything else (its KV
capacity, models, engine dialect, KV event endpoints, role) changes it in place. It keeps its id, its health, its
in-flight counts, its prefix records and its KV event subscription; under load nothing fails and a held prefix
still matches. (Before, any edit replaced the pod: a new id, not ready until its health checks passed again, its
prefix records and subscription dropped: 503s under load and the holder's match fell to 0 %.)"""
import json
import subprocess
import threading

from harness import GATEWAY_BIN, Sim, wait_until, write_pods
from prefix_helpers import KV_MODE, MODEL, chat, route, send, words

# Two passing checks make a new pod ready: a replaced pod would be out of the candidates for ~2 intervals.
HEALTH = {"health_check": {"interval_ms": 300, "healthy_threshold": 2}}
STANDARD = {"routing": {"strategy": "prefix-cache"}} | HEALTH
KV_HEALTH = KV_MODE | HEALTH


def pods_by_name(gw):
    return {p["name"]: p for p in gw.debug_pods()}


def edit(gw, entries, check):
    """Writes the pods file and waits until the gateway shows the edit (`check` on /debug/pods by name)."""
    write_pods(gw.pods_file, entries)
    wait_until(lambda: check(pods_by_name(gw)), timeout=10, what="the edit applied")


def test_edits_under_load_keep_each_pod_its_state_and_its_prefixes(tmp_path, gateway_factory):
    """Three edits of every pod's entry under load (KV capacity, then a second model, then the engine dialect): no
    request fails, each pod keeps its id and stays ready, and the pod holding a conversation's prefix still
    matches it in full."""
    sims = [Sim(tmp_path, f"edit-{i}") for i in range(3)]
    try:
        gw = gateway_factory(sims, config=STANDARD)
        ids = {name: p["id"] for name, p in pods_by_name(gw).items()}
        prompt = chat(words("held", 150))
        holder = send(gw, prompt)
        assert route(gw, prompt)[holder] == 100
        statuses, stop = [], threading.Event()

        def load(worker):
            for i in range(400):
                if stop.is_set():
                    return
                status, _, _ = gw.call("POST", "/v1/chat/completions", json.dumps(chat(f"load {worker} {i}")))
                statuses.append(status)

        workers = [threading.Thread(target=load, args=(w,)) for w in range(3)]
        for w in workers:
            w.start()
        try:
            wait_until(lambda: len(statuses) >= 10, what="traffic")
            entries = [s.pod_entry() for s in sims]
            for e in entries:
                e["kv_capacity_tokens"] = 50_000
            edit(gw, entries, lambda pods: all(p["kv_capacity_tokens"] == 50_000 for p in pods.values()))
            for e in entries:
                e["models"] = [MODEL, "alias-model"]
            edit(gw, entries, lambda pods: all("alias-model" in p["models"] for p in pods.values()))
            for e in entries:
                e["engine"] = "vllm"
            edit(gw, entries, lambda pods: all(p["engine_source"] == "configured" for p in pods.values()))
            # Traffic after the last edit too (a replaced pod would still be waiting for its health checks).
            after = len(statuses)
            wait_until(lambda: len(statuses) >= after + 10, what="traffic after the edits")
        finally:
            stop.set()
            for w in workers:
                w.join(30)
        assert statuses and all(s == 200 for s in statuses), sorted(set(statuses))
        pods = pods_by_name(gw)
        assert {name: p["id"] for name, p in pods.items()} == ids
        assert all(p["ready"] for p in pods.values())
        assert route(gw, prompt)[holder] == 100
        status, _, raw = gw.call("GET", "/v1/models")   # the edited models are served
        assert status == 200 and "alias-model" in {m["id"] for m in json.loads(raw)["data"]}
    finally:
        for s in sims:
            s.stop()


def test_kv_event_pod_keeps_its_records_and_subscription_through_edits(tmp_path, gateway_factory):
    """With KV event sync: an edit of the capacity keeps the pod's records (the held prefix still matches) and its
    subscription (blocks stored after the edit arrive); an edit of its publisher endpoints (the replay socket
    dropped) subscribes again, still keeping the records."""
    sims = [Sim(tmp_path, f"kv-edit-{i}", "--kv-capacity-tokens", "4096", kv_events=True, time_scale="0.01")
            for i in range(2)]
    try:
        gw = gateway_factory(sims, config=KV_HEALTH)
        first = chat(words("first", 150))
        holder = send(gw, first)
        wait_until(lambda: route(gw, first)[holder] >= 90, what="the first prompt's blocks indexed")
        entries = [s.pod_entry() for s in sims]
        ids = {name: p["id"] for name, p in pods_by_name(gw).items()}
        for e in entries:
            e["kv_capacity_tokens"] = 4096
        edit(gw, entries, lambda pods: all(p["kv_capacity_tokens"] == 4096 for p in pods.values()))
        assert route(gw, first)[holder] >= 90
        second = chat(words("second", 150))
        pod = send(gw, second)
        wait_until(lambda: route(gw, second)[pod] >= 90, what="blocks stored after the edit indexed")
        for e in entries:
            e.pop("kv_replay", None)
        edit(gw, entries, lambda pods: all(p["kv_replay"] == "" for p in pods.values()))
        assert route(gw, first)[holder] >= 90 and route(gw, second)[pod] >= 90
        wait_until(lambda: all(p["kv_sync"]["subscribed"] for p in pods_by_name(gw).values()), what="subscribed again")
        # ZeroMQ drops what a publisher sends before a new subscription has reached it, and the replay socket that
        # would fill that gap was just removed: a prompt stored in that window (long on a loaded machine) is never
        # indexed. So fresh prompts are sent until one is: blocks stored after the resubscription do arrive.
        for attempt in range(8):
            third = chat(words(f"third {attempt}", 150))
            pod3 = send(gw, third)
            try:
                wait_until(lambda: route(gw, third)[pod3] >= 90, timeout=3, what="a third prompt indexed")
                break
            except AssertionError:
                continue
        else:
            raise AssertionError("no prompt sent after the resubscription was indexed in 8 tries")
        assert {name: p["id"] for name, p in pods_by_name(gw).items()} == ids
        assert "publisher was edited" in gw.read_log()
    finally:
        for s in sims:
            s.stop()


def test_role_edits_apply_in_place_and_a_bad_role_keeps_the_last_pod_set(tmp_path, gateway_factory):
    """A pod's `role` (disaggregated prefill/decode) is shown by /debug/pods ("both" when absent) and an edit of it
    changes the pod in place (same id); a pods file leaving a model with prefill pods and none to decode on is applied
    with a warning naming the model; an unknown role is refused, naming the file, the entry and the key, and the last
    good pod set stays."""
    sims = [Sim(tmp_path, f"role-{i}") for i in range(2)]
    try:
        gw = gateway_factory(sims)
        pods = pods_by_name(gw)
        assert {p["role"] for p in pods.values()} == {"both"}
        ids = {name: p["id"] for name, p in pods.items()}
        entries = [s.pod_entry() for s in sims]
        entries[0]["role"], entries[1]["role"] = "prefill", "decode"
        edit(gw, entries, lambda pods: pods["role-0"]["role"] == "prefill" and pods["role-1"]["role"] == "decode")
        assert {name: p["id"] for name, p in pods_by_name(gw).items()} == ids
        entries[1]["role"] = "prefill"
        edit(gw, entries, lambda pods: all(p["role"] == "prefill" for p in pods.values()))
        assert "model 'sim-model': prefill pods role-0, role-1 but no pod with role decode or both" in gw.read_log()
        entries[1]["role"] = "prefill-decode"   # llm-d's name for both
        edit(gw, entries, lambda pods: pods["role-1"]["role"] == "both")
        entries[0]["role"] = "encoder"
        write_pods(gw.pods_file, entries)
        wait_until(lambda: "pods[0].role: expected prefill, decode or both, got 'encoder' (pod role-0)" in gw.read_log(),
                   timeout=10, what="the bad role refused")
        pods = pods_by_name(gw)
        assert pods["role-0"]["role"] == "prefill" and pods["role-1"]["role"] == "both"
        assert {name: p["id"] for name, p in pods.items()} == ids
    finally:
        for s in sims:
            s.stop()


def test_check_refuses_undecodable_models_and_prompt_matching_decode_strategies(tmp_path):
    """--check refuses a pods file in which a model has prefill pods but no decode or both pod (naming the file, the
    model and its prefill pods) and a decode strategy that scores by the prompt's match; it passes the file once a
    decode pod is there."""
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods:\n  - {name: p-0, address: 127.0.0.1:1, models: [m], role: prefill}\n"
                    "  - {name: d-0, address: 127.0.0.1:2, models: [other], role: decode}\n")
    config = tmp_path / "gw.yaml"
    config.write_text("discovery: {file: pods.yaml}\n")
    run = subprocess.run([GATEWAY_BIN, "--config", str(config), "--check"], capture_output=True, text=True)
    assert run.returncode == 1
    assert (f"{pods}: model 'm': prefill pods p-0 but no pod with role decode or both (its requests could never be "
            "decoded)") in run.stderr
    pods.write_text("pods:\n  - {name: p-0, address: 127.0.0.1:1, models: [m], role: prefill}\n"
                    "  - {name: d-0, address: 127.0.0.1:2, models: [m, other], role: decode}\n")
    run = subprocess.run([GATEWAY_BIN, "--config", str(config), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    for strategy in ("prefix-cache", "prefill-cost"):
        config.write_text(f"discovery: {{file: pods.yaml}}\ndisaggregation: {{decode_strategy: {strategy}}}\n")
        run = subprocess.run([GATEWAY_BIN, "--config", str(config), "--check"], capture_output=True, text=True)
        assert run.returncode == 1
        assert f"gw.yaml: disaggregation.decode_strategy: '{strategy}' scores by the prompt's prefix match" in run.stderr
    config.write_text("discovery: {file: pods.yaml}\ndisaggregation: {mode: sidecar, decode_strategy: power-of-two}\n")
    run = subprocess.run([GATEWAY_BIN, "--config", str(config), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
