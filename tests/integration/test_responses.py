"""The OpenAI Responses API (/v1/responses, GET/DELETE /v1/responses/{id}, POST .../cancel) through the real gateway
and simulator: streamed and not, chain affinity (a response's follow-ups and id calls reach the pod that stores it),
the pod-gone and unknown-id paths and their metric, bad bodies and hostile ids."""
import json

from api_helpers import api_keys_config, gateway_over, post_stream, typed_events
from api_helpers import openai_error as error_of
from harness import Sim, request, wait_until, write_pods

RANDOM = {"routing": {"strategy": "random"}}
EVENTS = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
END_EVENTS = ["response.output_text.done", "response.content_part.done", "response.output_item.done",
              "response.completed"]


def body(input_, **extra):
    return json.dumps({"model": "sim-model", "input": input_, "max_output_tokens": 5, **extra})


def affinity(gw, outcome):
    return gw.metric("prefixgate_response_affinity_total", outcome=outcome)


def test_non_streamed_response_is_relayed_with_its_usage(sims, gateway_factory):
    """A non-streamed response comes back whole in OpenAI's shape, with Responses usage (cached tokens included)."""
    gw = gateway_factory(sims[:2])
    status, headers, raw = gw.call("POST", "/v1/responses", body("hello there", instructions="Be brief."))
    assert status == 200, raw
    r = json.loads(raw)
    assert r["object"] == "response" and r["status"] == "completed" and r["id"].startswith("resp_")
    assert r["output"][0]["type"] == "message" and r["output"][0]["content"][0]["type"] == "output_text"
    assert r["output"][0]["content"][0]["text"]
    assert r["usage"]["output_tokens"] == 5 and r["usage"]["input_tokens"] > 0
    assert "cached_tokens" in r["usage"]["input_tokens_details"]
    pod = next(s for s in sims if s.name == headers["target-pod"])
    assert [q["path"] for q in pod.completions_seen()] == ["/v1/responses"]


def test_streamed_response_events_are_relayed_in_order(tmp_path):
    """A streamed response's typed events arrive in OpenAI's order with consecutive sequence numbers."""
    with gateway_over(tmp_path, [Sim(tmp_path, "engine-0")]) as gw:
        status, content_type, chunks = post_stream(gw, "/v1/responses", body("tell me about routers", stream=True))
        assert status == 200
        assert content_type.startswith("text/event-stream")
        events = typed_events(b"".join(data for _, data in chunks))
        names = [name for name, _ in events]
        assert names == EVENTS + ["response.output_text.delta"] * 5 + END_EVENTS
        assert all(name == data["type"] for name, data in events)
        assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
        completed = events[-1][1]["response"]
        assert completed["status"] == "completed" and completed["id"] == events[0][1]["response"]["id"]
        assert completed["usage"]["output_tokens"] == 5
        # The streamed response is remembered too: its id reaches its pod.
        status, headers, raw = gw.call("GET", f"/v1/responses/{completed['id']}")
        assert status == 200, raw
        assert json.loads(raw)["id"] == completed["id"]


def test_a_response_id_is_usable_as_soon_as_the_client_has_it(tmp_path):
    """The id of a response still streaming (its first event read, the rest to come) already reaches the producing
    pod: the gateway remembers it before the bytes carrying it go to the client, not when the answer ends (a
    client that chained or fetched it at once got the gateway's 404 while the remembering raced its request)."""
    import http.client

    sims = [Sim(tmp_path, f"engine-{i}", time_scale="50") for i in range(2)]
    with gateway_over(tmp_path, sims, config=RANDOM) as gw:
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        try:
            conn.request("POST", "/v1/responses", body=body("a long answer please", stream=True,
                                                             max_output_tokens=200),
                         headers={"Content-Type": "application/json"})
            res = conn.getresponse()
            assert res.status == 200
            home = res.getheader("target-pod")
            first = b""
            while b"\n\n" not in first:
                first += res.read1(4096)
            rid = typed_events(first.split(b"\n\n")[0] + b"\n\n")[0][1]["response"]["id"]
            status, headers, _ = gw.call("GET", f"/v1/responses/{rid}")
            assert headers.get("target-pod") == home, (status, headers)  # the gateway knew it: sent to its pod
            assert not res.isclosed() and res.read1(1)  # and the stream was still going
        finally:
            conn.close()


def test_a_chain_of_responses_stays_on_the_producing_pod(sims, gateway_factory):
    """Five requests, each continuing the last by previous_response_id, all land on the pod that stores the chain
    (under the random strategy) and succeed; the wrong pod would have answered 404."""
    gw = gateway_factory(sims, config=RANDOM)
    status, headers, raw = gw.call("POST", "/v1/responses", body("turn 0"))
    assert status == 200, raw
    previous, home = json.loads(raw)["id"], headers["target-pod"]
    for turn in range(1, 5):
        streamed = turn % 2 == 0
        status, headers, raw = gw.call("POST", "/v1/responses",
                                       body(f"turn {turn}", previous_response_id=previous, stream=streamed))
        assert status == 200, raw
        assert headers["target-pod"] == home
        if streamed:
            previous = typed_events(raw)[0][1]["response"]["id"]
        else:
            previous = json.loads(raw)["id"]
    assert affinity(gw, "hit") == 4
    # Without affinity the chain breaks: another pod does not hold the response.
    other = next(s for s in sims if s.name != home)
    status, _, raw = request("127.0.0.1", other.port, "POST", "/v1/responses",
                             body("turn 5", previous_response_id=previous))
    assert status == 404 and "not found" in error_of(raw)["message"]


def test_get_delete_and_cancel_by_id_reach_the_producing_pod(sims, gateway_factory):
    """GET, cancel and DELETE of a response id go to its pod; after DELETE the gateway forgets the id (404)."""
    gw = gateway_factory(sims, config=RANDOM)
    status, headers, raw = gw.call("POST", "/v1/responses", body("keep me"))
    assert status == 200, raw
    rid, home = json.loads(raw)["id"], headers["target-pod"]
    for _ in range(4):
        status, headers, raw = gw.call("GET", f"/v1/responses/{rid}")
        assert status == 200 and headers["target-pod"] == home and json.loads(raw)["id"] == rid
    status, headers, raw = gw.call("POST", f"/v1/responses/{rid}/cancel")
    assert status == 200 and headers["target-pod"] == home, raw
    status, headers, raw = gw.call("DELETE", f"/v1/responses/{rid}")
    assert status == 200 and headers["target-pod"] == home, raw
    assert json.loads(raw) == {"id": rid, "object": "response", "deleted": True}
    status, _, raw = gw.call("GET", f"/v1/responses/{rid}")
    assert status == 404 and error_of(raw)["code"] == 404
    status, _, _ = gw.call("PUT", f"/v1/responses/{rid}")
    assert status == 405


def test_a_gone_pod_leaves_the_choice_to_the_strategy(tmp_path):
    """When the producing pod leaves, a follow-up goes where the strategy chooses (counted pod_gone) and an id call
    is answered 404 by the gateway."""
    sims = [Sim(tmp_path, f"engine-{i}") for i in range(2)]
    with gateway_over(tmp_path, sims, config=RANDOM) as gw:
        status, headers, raw = gw.call("POST", "/v1/responses", body("first"))
        assert status == 200, raw
        rid, home = json.loads(raw)["id"], headers["target-pod"]
        survivor = next(s for s in sims if s.name != home)
        write_pods(gw.pods_file, [survivor])
        wait_until(lambda: {p["name"] for p in gw.debug_pods()} == {survivor.name}, what="pod removed")
        status, headers, raw = gw.call("POST", "/v1/responses", body("second", previous_response_id=rid))
        assert headers["target-pod"] == survivor.name
        assert status == 404, raw  # the survivor never stored the response
        assert affinity(gw, "pod_gone") == 1
        status, _, raw = gw.call("GET", f"/v1/responses/{rid}")
        assert status == 404 and "no longer ready" in error_of(raw)["message"]


def test_unknown_ids_bad_json_and_hostile_ids(sims, gateway_factory):
    """An unknown id is 404 from the gateway (counted unknown); bad JSON is 400; an overlong or odd id is 400."""
    gw = gateway_factory(sims[:2])
    status, _, raw = gw.call("GET", "/v1/responses/resp_does_not_exist")
    assert status == 404 and "not found" in error_of(raw)["message"]
    status, _, raw = gw.call("POST", "/v1/responses", body("x", previous_response_id="resp_nobody_made_this"))
    assert status == 404, raw  # the strategy's pod does not hold it
    assert affinity(gw, "unknown") == 2
    status, _, raw = gw.call("POST", "/v1/responses", b'{"model": "sim-model", "input": ')
    assert status == 400 and error_of(raw)["type"] == "invalid_request_error"
    status, _, raw = gw.call("POST", "/v1/responses", json.dumps({"input": "no model"}))
    assert status == 400
    for hostile in ["r" * 257, "resp_%2F..%2Fx", "resp_a/b", "resp_%00"]:
        status, _, raw = gw.call("GET", f"/v1/responses/{hostile}")
        assert status == 400, (hostile, raw)
        assert error_of(raw)["type"] == "invalid_request_error"
    status, _, raw = gw.call("POST", "/v1/responses/" + "r" * 300 + "/cancel")
    assert status == 400


def test_debug_route_reads_a_responses_body(sims, gateway_factory):
    """/debug/route?endpoint=responses decides for a Responses body, its prompt built from instructions and input."""
    gw = gateway_factory(sims[:2], config={"routing": {"strategy": "prefix-cache"}})
    status, _, raw = gw.admin("POST", "/debug/route?endpoint=responses", body("hello", instructions="Be brief."))
    assert status == 200, raw
    decision = json.loads(raw)
    assert decision["pod"] in ("engine-0", "engine-1")
    assert decision["tokens"] == len("Be brief. hello")


def test_calls_by_id_need_the_api_key(tmp_path):
    """With API keys on, a call naming a response id is refused 401 without a key (before any lookup) and served
    with one; the key of the Responses request is not forwarded to the engine."""
    sim = Sim(tmp_path, "engine-0")
    keys = api_keys_config(tmp_path, [{"name": "team-a", "key": "sk-a-0123456789"}])
    with gateway_over(tmp_path, [sim], config=keys) as gw:
        auth = {"authorization": "Bearer sk-a-0123456789"}
        status, _, raw = gw.call("POST", "/v1/responses", body("hi"), auth)
        assert status == 200, raw
        rid = json.loads(raw)["id"]
        status, _, raw = gw.call("GET", f"/v1/responses/{rid}")
        assert status == 401 and error_of(raw)["type"] == "authentication_error"
        status, _, raw = gw.call("GET", f"/v1/responses/{rid}", headers=auth)
        assert status == 200, raw
        assert "authorization" not in sim.completions_seen()[-1]["headers"]


def test_response_affinity_bounds_come_from_the_configuration(sims, gateway_factory):
    """routing.response_affinity.max_entries bounds the remembered ids: with 1, the older id is forgotten (404)."""
    gw = gateway_factory(sims[:2], config={"routing": {"strategy": "least-request",
                                                       "response_affinity": {"max_entries": 1, "ttl_ms": 60000}}})
    ids = [json.loads(gw.call("POST", "/v1/responses", body(f"r{i}"))[2])["id"] for i in range(2)]
    assert gw.call("GET", f"/v1/responses/{ids[0]}")[0] == 404
    assert gw.call("GET", f"/v1/responses/{ids[1]}")[0] == 200
