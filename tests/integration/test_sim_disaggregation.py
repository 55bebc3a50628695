"""The engine simulator's prefill/decode roles over HTTP, driven as vLLM's disaggregation proxy drives two vLLM
pods with NixlConnector: the prefill leg (kv_transfer_params.do_remote_decode, max_tokens 1, not streamed) answers
with the kv_transfer_params of NixlConnector's request_finished; passed on to the decode pod, they make it pull the
prompt's KV that its prefix cache lacks instead of computing it, cache and publish the pulled blocks, and decode
the same text an aggregated request gets."""
import json
import time

import msgpack
import pytest
import zmq

from harness import Sim, request, stream_content

BLOCK = 16
TRANSFER_MS_PER_1K = 1000.0   # large enough to see in /sim/requests, scaled by --time-scale 0.05 in real time
SYSTEM = "You are a careful assistant who answers questions about the simulator. " * 6
NIXL_KEYS = {"do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id", "remote_request_id",
             "remote_host", "remote_port", "tp_size"}


@pytest.fixture
def pods(tmp_path):
    prefill = Sim(tmp_path, "prefill-0", "--role", "prefill")
    decode = Sim(tmp_path, "decode-0", "--role", "decode", "--kv-transfer-ms-per-1k-tokens", str(TRANSFER_MS_PER_1K),
                 kv_events=True)
    yield prefill, decode
    prefill.stop()
    decode.stop()


def call(sim, path, body=None, method="POST"):
    status, _, data = request("127.0.0.1", sim.port, method, path, None if body is None else json.dumps(body))
    return status, data


def chat_body(question, max_tokens=4, **extra):
    return {"model": "sim-model", "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}], **extra}


def prefill_leg(sim, body):
    """What vLLM's toy proxy sends a prefill pod: the request, max_tokens 1, not streamed, do_remote_decode."""
    leg = dict(body, max_tokens=1, stream=False)
    leg.pop("stream_options", None)
    leg["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                 "remote_block_ids": None, "remote_host": None, "remote_port": None}
    status, data = call(sim, "/v1/chat/completions", leg)
    assert status == 200, data
    return json.loads(data)


def cached_now(sim, body):
    status, data = call(sim, "/sim/cache/match", {"messages": body["messages"]})
    assert status == 200, data
    return json.loads(data)


def last_record(sim):
    return sim.completions_seen()[-1]


def stored_hashes(sub, count, timeout_s=10):
    """Block hashes of BlockStored events until `count` arrived."""
    hashes, deadline = [], time.monotonic() + timeout_s
    while len(hashes) < count:
        assert time.monotonic() < deadline, f"only {len(hashes)} stored blocks"
        if sub.poll(100):
            _, _, payload = sub.recv_multipart()
            batch = msgpack.unpackb(payload)
            hashes += [h for event in batch[1] if event[0] == "BlockStored" for h in event[1]]
    return hashes


def test_roles_show_in_sim_info(pods):
    """Ensures --role shows in GET /sim/info, with the engine id (the pod's name)."""
    prefill, decode = pods
    for sim, role in ((prefill, "prefill"), (decode, "decode")):
        status, data = call(sim, "/sim/info", method="GET")
        assert status == 200
        info = json.loads(data)
        assert info["role"] == role and info["engine_id"] == sim.name


def test_prefill_leg_answers_with_nixl_kv_transfer_params(pods):
    """Ensures the prefill leg answers one token with NixlConnector's kv_transfer_params: the blocks holding the
    prompt, this pod's engine id and address, the request id, tp_size 1."""
    prefill, _ = pods
    answer = prefill_leg(prefill, chat_body("What is a block?"))
    params = answer["kv_transfer_params"]
    assert set(params) == NIXL_KEYS
    prompt_tokens = answer["usage"]["prompt_tokens"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert len(params["remote_block_ids"]) == -(-prompt_tokens // BLOCK)
    assert all(isinstance(b, int) for b in params["remote_block_ids"])
    assert params["remote_engine_id"] == prefill.name and params["remote_request_id"] == answer["id"]
    assert params["remote_host"] == "127.0.0.1" and params["remote_port"] == prefill.port
    assert params["tp_size"] == 1
    assert answer["usage"]["completion_tokens"] == 1
    assert last_record(prefill)["kv_role_leg"] == "prefill"


def test_decode_leg_pulls_the_prompt_caches_and_publishes_it(pods):
    """Ensures the decode leg pulls the whole prompt into an empty cache (taking the transfer time), answers the
    text an aggregated request gets, holds the prompt in its cache afterwards and publishes the pulled blocks; a
    second conversation with the same system prompt pulls only what the decode pod lacks."""
    prefill, decode = pods
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(decode.kv["kv events"])
        time.sleep(0.3)   # a SUB socket only receives what is published after it has joined

        body = chat_body("What is a block?")
        aggregated = json.loads(call(prefill, "/v1/chat/completions", body)[1])
        params = prefill_leg(prefill, body)["kv_transfer_params"]
        status, data = call(decode, "/v1/chat/completions", dict(body, kv_transfer_params=params))
        assert status == 200, data
        answer = json.loads(data)
        prompt_tokens = answer["usage"]["prompt_tokens"]
        assert answer["choices"][0]["message"]["content"] == aggregated["choices"][0]["message"]["content"]
        assert answer["kv_transfer_params"] is None
        record = last_record(decode)
        assert record["kv_role_leg"] == "decode"
        assert record["kv_pulled_tokens"] == prompt_tokens
        assert record["kv_transfer_ms"] == pytest.approx(prompt_tokens * TRANSFER_MS_PER_1K / 1000)
        assert record["cached_tokens"] == prompt_tokens - 1     # vLLM counts pulled tokens as cached
        held = cached_now(decode, body)["cached_tokens"]
        assert held == (prompt_tokens - 1) // BLOCK * BLOCK
        assert len(stored_hashes(sub, held // BLOCK)) >= held // BLOCK

        # Same system prompt, another question: the decode pod already holds the shared blocks.
        second = chat_body("And what is a block hash?", stream=True)
        before = cached_now(decode, second)
        assert before["cached_tokens"] > 0
        params = prefill_leg(prefill, second)["kv_transfer_params"]
        status, data = call(decode, "/v1/chat/completions", dict(second, kv_transfer_params=params))
        assert status == 200
        record = last_record(decode)
        assert record["kv_pulled_tokens"] == before["prompt_tokens"] - before["cached_tokens"]
        assert record["kv_pulled_tokens"] < before["prompt_tokens"]
        expected = json.loads(call(prefill, "/v1/chat/completions", dict(second, stream=False))[1])
        assert stream_content(data) == expected["choices"][0]["message"]["content"]
    finally:
        sub.close(linger=0)
        ctx.term()


def test_decode_pod_without_params_computes_and_malformed_params_are_refused(pods):
    """Ensures a decode-role pod serves a request without kv_transfer_params itself (no pull), and malformed
    kv_transfer_params get a 400 in vLLM's error shape."""
    _, decode = pods
    status, data = call(decode, "/v1/chat/completions", chat_body("Aggregated?"))
    assert status == 200, data
    record = last_record(decode)
    assert record["kv_role_leg"] == "" and record["kv_pulled_tokens"] == 0 and record["cached_tokens"] == 0
    for params in (5, {"do_remote_prefill": "yes"}, {"do_remote_prefill": True, "remote_block_ids": [1]}):
        status, data = call(decode, "/v1/chat/completions", dict(chat_body("Bad"), kv_transfer_params=params))
        assert status == 400, data
        error = json.loads(data)["error"]
        assert error["code"] == 400 and "kv_transfer_params" in error["message"]
