"""Many clients at once on several event-loop threads, with the admin endpoints read and the pods file rewritten
meanwhile. In the ThreadSanitizer build (ctest label `tsan`) this is the integration test that must raise no report:
the harness fails a test whose gateway or engine log holds one (check_sanitizer_reports)."""
import json
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

from harness import request, sse_events, wait_until, write_pods

CLIENTS = 6
MIN_REQUESTS_PER_CLIENT = 20     # and on until the pods file was rewritten and restored
MAX_REQUESTS_PER_CLIENT = 2000
ADMIN_READS = 400
DEADLINE_S = 120
PREFIXES = ["You are a terse assistant. " * 20, "Answer in French, please. " * 20]


def one_request(gw, client, n):
    """Sends request n of a client (chat or completion, streamed or not, on a shared prefix); returns a problem
    string or None."""
    stream, chat = (client + n) % 2 == 0, (client + n // 2) % 2 == 0
    prompt = PREFIXES[n % 2] + f"client {client} question {n}"
    body = {"model": "sim-model", "max_tokens": 6, "stream": stream}
    body.update({"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt})
    path = "/v1/chat/completions" if chat else "/v1/completions"
    status, _, data = gw.call("POST", path, json.dumps(body))
    if status != 200:
        return f"{path} stream={stream}: {status} {data[:200]!r}"
    if stream and sse_events(data)[-1:] != ["[DONE]"]:
        return f"{path}: stream without [DONE]"
    return None


def requests_counted(gw):
    return sum(s.value for f in text_string_to_metric_families(gw.metrics_text()) for s in f.samples
               if s.name == "prefixgate_requests_total")


def test_concurrent_clients_admin_reads_and_a_pods_file_rewrite(sims, gateway_factory):
    """Six clients' streamed and plain requests on three event-loop threads all succeed and are counted once each,
    while /metrics and /debug/pods are read and a pod leaves and returns through the pods file."""
    gw = gateway_factory(sims, config={"threads": 3, "routing": {"strategy": "prefix-cache"}})
    deadline = time.monotonic() + DEADLINE_S
    problems, admin_statuses, sent = [], [], [0] * CLIENTS
    rewritten, clients_done = threading.Event(), threading.Event()

    def client(c):
        for n in range(MAX_REQUESTS_PER_CLIENT):
            if n >= MIN_REQUESTS_PER_CLIENT and rewritten.is_set():
                return
            if time.monotonic() > deadline:
                problems.append(f"client {c}: deadline passed at request {n}")
                return
            sent[c] += 1
            problem = one_request(gw, c, n)
            if problem:
                problems.append(f"client {c}: {problem}")

    def admin_reader():
        for n in range(ADMIN_READS):
            if clients_done.is_set() or time.monotonic() > deadline:
                return
            admin_statuses.append(gw.admin("GET", "/metrics" if n % 2 else "/debug/pods")[0])

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    reader = threading.Thread(target=admin_reader)
    for t in [*threads, reader]:
        t.start()
    # The rewrite lands while the clients are running: one pod leaves, then comes back.
    wait_until(lambda: requests_counted(gw) >= CLIENTS, timeout=60, what="traffic to start")
    write_pods(gw.pods_file, sims[:2])
    wait_until(lambda: len(gw.debug_pods()) == 2, timeout=10, what="the pod to leave")
    write_pods(gw.pods_file, sims)
    wait_until(lambda: len(gw.debug_pods()) == 3, timeout=10, what="the pod to return")
    rewritten.set()
    for t in threads:
        t.join(DEADLINE_S)
    clients_done.set()
    reader.join(DEADLINE_S)

    assert problems == []
    assert admin_statuses and set(admin_statuses) == {200}
    # A request is counted just after its last byte is written, so the client may see the answer first.
    wait_until(lambda: all(p["in_flight"] == 0 for p in gw.debug_pods()), timeout=10, what="in-flight back to 0")
    wait_until(lambda: requests_counted(gw) >= sum(sent), timeout=10, what="every request counted")
    assert requests_counted(gw) == sum(sent)
    assert request("127.0.0.1", gw.admin_port, "GET", "/healthz")[0] == 200
