"""limits.max_json_depth through the real gateway: a body nested deeper is answered 400 and never forwarded."""
import json


def nested_chat(depth):
    """A valid chat body nested `depth` deep (its own object counts 1) in a field the gateway does not read."""
    inner = depth - 1
    return ('{"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "x": '
            + "[" * inner + "]" * inner + "}")


def test_a_deeply_nested_body_gets_400_and_the_pod_keeps_serving(sims, gateway_factory):
    """100,000 nested arrays: 400 in OpenAI's shape naming the key, the engine never sees the body, and the next
    request is served by the same (only) pod, not ejected."""
    gw = gateway_factory(sims[:1])
    status, _, body = gw.call("POST", "/v1/chat/completions", nested_chat(100_000))
    assert status == 400, body
    error = json.loads(body)["error"]
    assert "limits.max_json_depth (64)" in error["message"], error
    assert error["code"] == 400 and error["param"] is None and error["type"]
    assert sims[0].completions_seen() == []

    status, headers, body = gw.chat("a normal request right after")
    assert status == 200, body
    assert headers["target-pod"] == "engine-0"
    assert len(sims[0].completions_seen()) == 1


def test_the_configured_depth_is_the_limit(sims, gateway_factory):
    """With limits.max_json_depth: 5 a body 5 deep is proxied and one 6 deep is refused."""
    gw = gateway_factory(sims[:1], config={"limits": {"max_json_depth": 5}})
    status, _, body = gw.call("POST", "/v1/chat/completions", nested_chat(5))
    assert status == 200, body
    status, _, body = gw.call("POST", "/v1/chat/completions", nested_chat(6))
    assert status == 400, body
    assert "limits.max_json_depth (5)" in json.loads(body)["error"]["message"]
    assert len(sims[0].completions_seen()) == 1
