"""Kubernetes discovery (discovery.kubernetes) through the real gateway against a fake API server over HTTPS:
list, watch (ADDED / MODIFIED / DELETED / BOOKMARK), 410 Gone, dropped streams, token rotation, a refused
certificate, and endpoints flipping between ready and terminating under load."""
import json
import os
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fake_kube_api import NOT_READY, READY, TERMINATING, FakeKubeApi, endpoint_slice, make_certs
from harness import Gateway, Sim, wait_until

MODEL = "sim-model"


@pytest.fixture
def kube(tmp_path):
    """A fake API server over HTTPS (a self-signed CA), its token file and CA file."""
    ca, _, cert, key = make_certs(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text("token-1\n")
    api = FakeKubeApi("token-1", cert, key)
    api.ca_file, api.token_file = ca, token_file
    yield api
    api.close()


def k8s_config(api, **extra):
    return {"discovery": {"kubernetes": {"api_server": api.url, "token_file": str(api.token_file),
                                         "ca_file": str(api.ca_file), "namespaces": ["default"], **extra}}}


def slice_name(sim):
    return f"{MODEL}-{sim.name}"


def put_sims(api, sims, conditions=None, silently=False):
    """One slice per simulated pod (each listens on its own port; a slice has one port for all its endpoints)."""
    for s in sims:
        api.put(endpoint_slice(slice_name(s), MODEL, [(s.name, "127.0.0.1", (conditions or {}).get(s.name, READY))],
                               port=s.port), silently=silently)


def pod_names(gw):
    return sorted(p["name"] for p in gw.debug_pods())


def sample(gw, name, labels):
    for family in text_string_to_metric_families(gw.metrics_text()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0


def events_total(gw, kind):
    return sample(gw, "prefixgate_discovery_events_total", {"source": "kubernetes", "type": kind})


def test_list_maps_slices_to_ready_pods_with_token_and_query(tmp_path, kube):
    """The first list gives the ready endpoints (ready true or null, not terminating) as pods with the slice's model,
    port and KV endpoints; a pod in two slices (dual stack) appears once; the request carries the token and query."""
    kube.put(endpoint_slice("llama-ipv4", "llama", [("pod-a", "10.0.0.1", READY), ("pod-b", "10.0.0.2", None),
                                                    ("pod-c", "10.0.0.3", TERMINATING),
                                                    ("pod-d", "10.0.0.4", NOT_READY)], port=8000))
    kube.put(endpoint_slice("llama-ipv6", "llama", [("pod-a", "fd00::1", READY)], port=8000, address_type="IPv6"))
    kube.put(endpoint_slice("other", "qwen", [("pod-q", "10.0.1.1", READY)],
                            labels={"model.aibrix.ai/name": "qwen"}))
    unlabelled = endpoint_slice("unrelated", "x", [("pod-x", "10.0.2.1", READY)])
    del unlabelled["metadata"]["labels"]["model.aibrix.ai/name"]
    kube.put(unlabelled)
    gw = Gateway(tmp_path, [], config=k8s_config(kube, kv_events_port=5557), wait_ready=False)
    try:
        wait_until(lambda: len(gw.debug_pods()) == 3, what="three pods from the list")
        pods = {p["name"]: p for p in gw.debug_pods()}
        assert sorted(pods) == ["pod-a", "pod-b", "pod-q"]
        assert pods["pod-a"]["address"] == "10.0.0.1:8000"  # the IPv4 slice comes first
        assert pods["pod-a"]["models"] == ["llama"] and pods["pod-q"]["models"] == ["qwen"]
        assert pods["pod-b"]["kv_events"] == "tcp://10.0.0.2:5557"
        assert sample(gw, "prefixgate_discovery_endpoints", {"source": "kubernetes"}) == 3
        assert events_total(gw, "list") == 1
        first = kube.seen(lambda r: True)[0]
        assert first["token"] == "token-1" and not first["watch"]
        assert first["query"]["labelSelector"] == "model.aibrix.ai/name"
        watch = wait_until(lambda: kube.seen(lambda r: r["watch"]), what="a watch")[0]
        assert watch["query"]["allowWatchBookmarks"] == "true"
        assert watch["query"]["resourceVersion"] == str(kube.rv)
        assert int(watch["query"]["timeoutSeconds"]) > 0
    finally:
        gw.stop()


def test_in_cluster_server_from_the_environment(tmp_path, kube):
    """api_server empty: the gateway talks HTTPS to $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT."""
    sim = Sim(tmp_path, "engine-0")
    put_sims(kube, [sim])
    config = k8s_config(kube, api_server="")
    gw = Gateway(tmp_path, [], config=config,
                 env={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(kube.port)})
    try:
        assert pod_names(gw) == ["engine-0"]
        assert gw.chat("hello")[0] == 200
        assert f"at https://127.0.0.1:{kube.port}" in gw.read_log()
    finally:
        gw.stop()
        sim.stop()


def test_plain_http_api_server(tmp_path):
    """An http:// API server (e.g. kubectl proxy) is listed and watched without TLS."""
    sim = Sim(tmp_path, "engine-0")
    token_file = tmp_path / "token"
    token_file.write_text("t")
    api = FakeKubeApi("t")
    api.token_file, api.ca_file = token_file, tmp_path / "no-ca.crt"
    put_sims(api, [sim])
    gw = Gateway(tmp_path, [], config=k8s_config(api))
    try:
        assert pod_names(gw) == ["engine-0"]
        wait_until(lambda: api.seen(lambda r: r["watch"]), what="a watch")
        api.delete(slice_name(sim))
        wait_until(lambda: pod_names(gw) == [], what="the deleted slice")
    finally:
        gw.stop()
        api.close()
        sim.stop()


def test_watch_events_change_the_pod_set_and_bookmark_advances_the_version(tmp_path, kube):
    """ADDED, MODIFIED and DELETED events change the routed pod set; a BOOKMARK only moves the resourceVersion the
    next watch resumes from (no relist)."""
    sims = [Sim(tmp_path, f"engine-{i}") for i in range(2)]
    put_sims(kube, sims[:1])
    gw = Gateway(tmp_path, [], config=k8s_config(kube))
    try:
        assert pod_names(gw) == ["engine-0"]
        wait_until(lambda: kube.seen(lambda r: r["watch"]), what="a watch")
        put_sims(kube, sims[1:])  # ADDED
        wait_until(lambda: pod_names(gw) == ["engine-0", "engine-1"], what="the added slice")
        put_sims(kube, sims[:1], {"engine-0": TERMINATING})  # MODIFIED
        wait_until(lambda: pod_names(gw) == ["engine-1"], what="the terminating pod to leave")
        status, headers, _ = gw.chat("hello")
        assert status == 200 and headers["target-pod"] == "engine-1"
        kube.delete(slice_name(sims[1]))  # DELETED
        wait_until(lambda: pod_names(gw) == [], what="the deleted slice")
        put_sims(kube, sims[:1])
        wait_until(lambda: pod_names(gw) == ["engine-0"], what="the pod back")
        lists = len(kube.seen(lambda r: not r["watch"]))
        version = kube.bookmark()
        wait_until(lambda: events_total(gw, "bookmark") >= 1, what="the bookmark")
        kube.end_watches()
        resumed = wait_until(lambda: kube.seen(lambda r: r["watch"] and r["query"]["resourceVersion"] == version),
                             what="a watch resumed from the bookmark's version")
        assert resumed and len(kube.seen(lambda r: not r["watch"])) == lists, "a bookmark or a clean end relisted"
        assert pod_names(gw) == ["engine-0"]
        for kind in ("list", "added", "modified", "deleted"):
            assert events_total(gw, kind) >= 1, kind
    finally:
        gw.stop()
        for s in sims:
            s.stop()


def test_a_relabelled_slice_changes_its_pods_in_place(tmp_path, kube):
    """A MODIFIED slice whose endpoints keep their names and addresses but whose engine label changed edits its
    pods in place: the same id, still ready, the dialect now the labelled one (before, any change made a new pod,
    not ready until its health checks passed again, with its prefix records dropped)."""
    sim = Sim(tmp_path, "engine-0")
    put_sims(kube, [sim])
    gw = Gateway(tmp_path, [], config=k8s_config(kube))
    try:
        wait_until(lambda: [p["ready"] for p in gw.debug_pods()] == [True], what="the pod ready")
        before = gw.debug_pods()[0]
        assert before["engine_source"] != "configured"
        wait_until(lambda: kube.seen(lambda r: r["watch"]), what="a watch")
        kube.put(endpoint_slice(slice_name(sim), MODEL, [(sim.name, "127.0.0.1", READY)], port=sim.port,
                                labels={"model.aibrix.ai/engine": "vllm"}))
        wait_until(lambda: gw.debug_pods()[0]["engine_source"] == "configured", what="the label applied")
        after = gw.debug_pods()[0]
        assert after["id"] == before["id"] and after["ready"] and after["engine"] == "vllm"
    finally:
        gw.stop()
        sim.stop()


def test_role_label_sets_each_slices_pods_role(tmp_path, kube):
    """Prefill and decode pods behind separate Services: each slice's role label (llm-d.ai/role) is its pods' role in
    /debug/pods; a relabelled slice changes its pods' role in place; an unknown value makes them `both` with a
    warning naming the slice and the value; role_label "role-name" (AIBrix's) reads that label instead."""
    kube.put(endpoint_slice("llama-prefill", "llama", [("pod-p", "10.0.0.1", READY)],
                            labels={"llm-d.ai/role": "prefill"}))
    kube.put(endpoint_slice("llama-decode", "llama", [("pod-d", "10.0.0.2", READY)],
                            labels={"llm-d.ai/role": "decode", "role-name": "prefill"}))
    kube.put(endpoint_slice("llama-plain", "llama", [("pod-b", "10.0.0.3", READY)]))
    gw = Gateway(tmp_path, [], config=k8s_config(kube), wait_ready=False)
    try:
        roles = lambda: {p["name"]: p["role"] for p in gw.debug_pods()}
        wait_until(lambda: len(gw.debug_pods()) == 3, what="three pods from the list")
        assert roles() == {"pod-p": "prefill", "pod-d": "decode", "pod-b": "both"}
        ids = {p["name"]: p["id"] for p in gw.debug_pods()}
        wait_until(lambda: kube.seen(lambda r: r["watch"]), what="a watch")
        kube.put(endpoint_slice("llama-plain", "llama", [("pod-b", "10.0.0.3", READY)],
                                labels={"llm-d.ai/role": "prefill-decode"}))
        kube.put(endpoint_slice("llama-prefill", "llama", [("pod-p", "10.0.0.1", READY)],
                                labels={"llm-d.ai/role": "encode"}))
        wait_until(lambda: roles()["pod-p"] == "both", what="the unknown role read as both")
        assert roles() == {"pod-p": "both", "pod-d": "decode", "pod-b": "both"}
        assert {p["name"]: p["id"] for p in gw.debug_pods()} == ids
        assert "EndpointSlice default/llama-prefill: label llm-d.ai/role: unknown role 'encode'" in gw.read_log()
    finally:
        gw.stop()
    aibrix = Gateway(tmp_path, [], config=k8s_config(kube, role_label="role-name"), name="aibrix", wait_ready=False)
    try:
        wait_until(lambda: len(aibrix.debug_pods()) == 3, what="three pods from the list")
        assert {p["name"]: p["role"] for p in aibrix.debug_pods()} == {"pod-p": "both", "pod-d": "prefill",
                                                                      "pod-b": "both"}
    finally:
        aibrix.stop()


def test_410_gone_relists_and_sees_changes_the_watch_missed(tmp_path, kube):
    """An ERROR 410 event (the resourceVersion was compacted away) makes the gateway list again: a change made
    without an event (lost to compaction) reaches the pod set only through that relist."""
    sims = [Sim(tmp_path, f"engine-{i}") for i in range(2)]
    put_sims(kube, sims[:1])
    gw = Gateway(tmp_path, [], config=k8s_config(kube))
    try:
        wait_until(lambda: kube.seen(lambda r: r["watch"]), what="a watch")
        lists = len(kube.seen(lambda r: not r["watch"]))
        put_sims(kube, sims[1:], silently=True)
        kube.expire()
        wait_until(lambda: pod_names(gw) == ["engine-0", "engine-1"], what="the relist")
        assert len(kube.seen(lambda r: not r["watch"])) > lists
        assert events_total(gw, "relist") >= 1 and events_total(gw, "error") >= 1
        assert "(410): relisting" in gw.read_log()
    finally:
        gw.stop()
        for s in sims:
            s.stop()


def test_dropped_watch_and_failing_lists_keep_the_pod_set_then_resume(tmp_path, kube):
    """A watch cut mid-stream and an API server answering 500 for a while never empty the pod set (requests keep
    working); the gateway relists with back-off and then follows new events again."""
    sims = [Sim(tmp_path, f"engine-{i}") for i in range(2)]
    put_sims(kube, sims[:1])
    gw = Gateway(tmp_path, [], config=k8s_config(kube))
    try:
        wait_until(lambda: kube.seen(lambda r: r["watch"]), what="a watch")
        kube.list_failures = 3
        kube.drop_watches()
        wait_until(lambda: len(kube.seen(lambda r: r.get("status") == 500)) == 3, timeout=20,
                   what="three failed lists")
        assert pod_names(gw) == ["engine-0"]
        assert gw.chat("still routed")[0] == 200
        put_sims(kube, sims[1:])
        wait_until(lambda: pod_names(gw) == ["engine-0", "engine-1"], timeout=20, what="the change after recovery")
        log = gw.read_log()
        assert "watch broke" in log and "list of EndpointSlices failed" in log
    finally:
        gw.stop()
        for s in sims:
            s.stop()


def test_rotated_token_is_read_again_after_a_401(tmp_path, kube):
    """After the token rotates, the old one is refused with 401; the gateway re-reads the token file and lists and
    watches with the new token (the pod set stays meanwhile)."""
    sims = [Sim(tmp_path, f"engine-{i}") for i in range(2)]
    put_sims(kube, sims[:1])
    gw = Gateway(tmp_path, [], config=k8s_config(kube))
    try:
        wait_until(lambda: kube.seen(lambda r: r["watch"]), what="a watch")
        kube.tokens = {"token-2"}
        kube.drop_watches()
        wait_until(lambda: kube.seen(lambda r: r.get("status") == 401), what="the old token refused")
        assert pod_names(gw) == ["engine-0"]
        tmp = kube.token_file.with_suffix(".tmp")
        tmp.write_text("token-2\n")
        os.replace(tmp, kube.token_file)
        put_sims(kube, sims[1:])
        wait_until(lambda: pod_names(gw) == ["engine-0", "engine-1"], timeout=20, what="the pod set with the new token")
        # The relist is what published engine-1; the watch with the new token follows it.
        wait_until(lambda: kube.seen(lambda r: r["token"] == "token-2" and r["watch"] and r.get("status") == 200),
                   timeout=10, what="a watch with the new token")
        assert "token refused" in gw.read_log()
    finally:
        gw.stop()
        for s in sims:
            s.stop()


@pytest.mark.parametrize("wrong", ["ca", "host"])
def test_unverified_api_server_is_refused_and_the_pod_set_kept(tmp_path, kube, wrong):
    """A server certificate from another CA, or one for another host name, is refused (no request reaches the
    server); a running gateway keeps its pod set and keeps routing."""
    sim = Sim(tmp_path, "engine-0")
    put_sims(kube, [sim])
    if wrong == "ca":
        bad_ca, _, bad_cert, bad_key = make_certs(tmp_path, name="other")
    else:
        ca_key = kube.ca_file.with_suffix(".key")
        bad_ca, _, bad_cert, bad_key = make_certs(tmp_path, name="elsewhere", hosts=("DNS:elsewhere.invalid",),
                                                  ca=(kube.ca_file, ca_key))
    impostor = FakeKubeApi("token-1", bad_cert, bad_key)
    put_sims(impostor, [sim])
    gw = Gateway(tmp_path, [], config=k8s_config(kube))
    refused = Gateway(tmp_path, [], config={"discovery": {"kubernetes": {
        **k8s_config(kube)["discovery"]["kubernetes"], "api_server": impostor.url}}}, name="refused", wait_ready=False)
    try:
        wait_until(lambda: "TLS handshake" in refused.read_log(), what="the refused handshake")
        assert impostor.seen(lambda r: True) == [] and refused.debug_pods() == []
        assert refused.admin("GET", "/readyz")[0] != 200
        # The running gateway's API server comes back (same address) with the impostor's certificate: refused,
        # and the pod set stays.
        assert pod_names(gw) == ["engine-0"]
        kube.close()
        swapped = FakeKubeApi("token-1", bad_cert, bad_key, port=kube.port)
        try:
            put_sims(swapped, [sim])
            wait_until(lambda: "TLS handshake" in gw.read_log(), timeout=20, what="the swapped server refused")
            assert swapped.seen(lambda r: True) == []
            assert pod_names(gw) == ["engine-0"] and gw.chat("still here")[0] == 200
        finally:
            swapped.close()
    finally:
        refused.stop()
        gw.stop()
        impostor.close()
        sim.stop()


def test_endpoints_flipping_between_ready_and_terminating_under_load_fail_no_request(tmp_path, kube):
    """Pods whose endpoints turn terminating and ready again, one at a time, while clients keep sending requests:
    every request succeeds (a leaving pod finishes what it holds) and every pod takes traffic."""
    sims = [Sim(tmp_path, f"engine-{i}", time_scale="0.2") for i in range(3)]
    put_sims(kube, sims)
    gw = Gateway(tmp_path, [], config=k8s_config(kube))
    wait_until(lambda: sum(p["ready"] for p in gw.debug_pods()) == 3, what="three ready pods")
    stop = threading.Event()
    results, lock = [], threading.Lock()

    def client(i):
        for n in range(400):  # bounded; the flips end the loop much sooner
            if stop.is_set():
                return
            try:
                status, headers, _ = gw.chat(f"client {i} request {n}", max_tokens=16)
                outcome = (status, headers.get("target-pod"))
            except OSError as e:
                outcome = (repr(e), None)
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    flips = 0
    try:
        for round_ in range(2):
            for s in sims:
                put_sims(kube, [s], {s.name: TERMINATING})
                wait_until(lambda: s.name not in pod_names(gw), what=f"{s.name} out")
                served = len(results)
                wait_until(lambda: len(results) >= served + 8, what="requests while a pod is out")
                put_sims(kube, [s])
                wait_until(lambda: any(p["name"] == s.name and p["ready"] for p in gw.debug_pods()),
                           what=f"{s.name} ready again")
                served = len(results)
                wait_until(lambda: len(results) >= served + 8, what="requests with every pod in")
                flips += 1
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        gw.stop()
        for s in sims:
            s.stop()
    failed = [r for r in results if r[0] != 200]
    assert flips == 6 and len(results) >= 6 * 16
    assert failed == [], f"{len(failed)} of {len(results)} requests failed: {failed[:5]}"
    assert {pod for _, pod in results} == {"engine-0", "engine-1", "engine-2"}
