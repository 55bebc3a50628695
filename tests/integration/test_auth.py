"""Client API keys (auth.api_keys_file) through the real gateway and simulated engines: 401/403/429, what the
engine sees, the key's name in logs and metrics, reloading the keys file."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import GATEWAY_BIN, Gateway, Sim, sse_events, wait_until

SECRET_A = "sk-team-a-0123456789abcdef"
SECRET_B = "sk-team-b-fedcba9876543210"


def write_keys(path, keys):
    """Writes the keys file atomically (rename), as an operator's tooling or a mounted Secret would."""
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(yaml.safe_dump({"keys": keys}))
    os.replace(tmp, path)


def bearer(key):
    return {"authorization": f"Bearer {key}"}


def settled_metrics(gw, name, value, **labels):
    """/metrics once the series has `value`: a request is counted just after its last byte is written, so the
    client may ask before that."""
    return wait_until(lambda: (lambda text: text if sample(text, name, **labels) == value else None)(gw.metrics_text()),
                      timeout=3, what=f"{name}{labels} == {value}")


def error_of(body):
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def log_containing(gw, text, timeout=3):
    """The gateway's log once it contains `text`."""
    return wait_until(lambda: (lambda log: log if text in log else None)(gw.read_log()), timeout=timeout,
                      what=repr(text) + " in the log")


def sample(metrics_text, name, **labels):
    """The value of one series of `name` with exactly these labels (None when absent)."""
    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return None


@pytest.fixture
def keyed(tmp_path):
    """A gateway with a keys file (team-a: models [sim-model], 3 requests a minute; team-b: every model, no limit)
    in front of two pods serving sim-model and other-model."""
    sims = [Sim(tmp_path, "engine-a"), Sim(tmp_path, "engine-b", model="other-model")]
    keys_file = tmp_path / "keys.yaml"
    write_keys(keys_file, [
        {"name": "team-a", "key": SECRET_A, "models": ["sim-model"], "requests_per_minute": 3},
        {"name": "team-b", "key": SECRET_B},
    ])
    gw = Gateway(tmp_path, sims, config={"auth": {"api_keys_file": "keys.yaml", "file_poll_interval_ms": 100}})
    yield gw, sims, keys_file
    gw.stop()
    for s in sims:
        s.stop()


def test_missing_or_unknown_key_is_401_and_never_reaches_an_engine(keyed):
    """Without a bearer key, or with one not in the file, every client endpoint answers 401
    authentication_error and the engines see nothing."""
    gw, sims, _ = keyed
    for headers in (None, bearer("sk-not-a-key"), {"authorization": SECRET_A}, bearer(SECRET_A + "x")):
        status, res_headers, body = gw.chat("hello", headers=headers)
        assert status == 401, (headers, body)
        assert error_of(body)["type"] == "authentication_error"
        assert res_headers["www-authenticate"] == "Bearer"
    assert gw.call("GET", "/v1/models")[0] == 401
    assert gw.call("POST", "/v1/embeddings", json.dumps({"model": "sim-model", "input": "x"}))[0] == 401
    assert all(s.completions_seen() == [] for s in sims)
    assert gw.chat("hello", headers=bearer(SECRET_A))[0] == 200


def test_model_outside_the_allow_list_is_403_and_models_lists_only_the_keys_models(keyed):
    """A key limited to sim-model gets 403 permission_error for other-model and sees only sim-model in /v1/models;
    a key without a list sees both."""
    gw, sims, _ = keyed
    status, _, body = gw.chat("hello", model="other-model", headers=bearer(SECRET_A))
    assert status == 403
    err = error_of(body)
    assert err["type"] == "permission_error" and err["param"] == "model"
    assert sims[1].completions_seen() == []
    listed = lambda key: sorted(m["id"] for m in json.loads(gw.call("GET", "/v1/models", headers=bearer(key))[2])["data"])
    assert listed(SECRET_A) == ["sim-model"]
    assert listed(SECRET_B) == ["other-model", "sim-model"]
    assert gw.chat("hello", model="other-model", headers=bearer(SECRET_B))[0] == 200


def test_requests_per_minute_answers_429_with_retry_after_for_that_key_only(keyed):
    """team-a's fourth request within a minute gets 429 rate_limit_error with retry-after (the seconds until one
    request's allowance refills: 60 s / 3 = 20 s at most); team-b is not affected."""
    gw, _, _ = keyed
    for i in range(3):
        assert gw.chat(f"request {i}", headers=bearer(SECRET_A))[0] == 200
    status, headers, body = gw.chat("one too many", headers=bearer(SECRET_A))
    assert status == 429
    assert error_of(body)["type"] == "rate_limit_error"
    assert 1 <= int(headers["retry-after"]) <= 20
    assert gw.chat("other key", headers=bearer(SECRET_B))[0] == 200
    metrics = settled_metrics(gw, "prefixgate_api_key_requests_total", 1, key="team-a", status="429")
    assert sample(metrics, "prefixgate_api_key_rate_limited_total", key="team-a", limit="requests") == 1
    assert sample(metrics, "prefixgate_api_key_requests_total", key="team-a", status="200") == 3


def test_tokens_per_minute_counts_the_engines_usage(tmp_path):
    """A key's tokens are the responses' prompt + completion tokens: once a response has used up tokens_per_minute,
    the next request gets 429 with retry-after, and the counter equals the usage the engine reported."""
    sim = Sim(tmp_path, "engine-0")
    keys_file = tmp_path / "keys.yaml"
    write_keys(keys_file, [{"name": "small", "key": SECRET_A, "tokens_per_minute": 20}])
    gw = Gateway(tmp_path, [sim], config={"auth": {"api_keys_file": str(keys_file)}})
    try:
        status, _, body = gw.chat("a prompt long enough to use up the whole allowance of twenty tokens at once",
                                  max_tokens=8, headers=bearer(SECRET_A))
        assert status == 200
        usage = json.loads(body)["usage"]
        used = usage["prompt_tokens"] + usage["completion_tokens"]
        assert used > 20
        # Charged when the response ends, just after its last byte: wait for it rather than race it.
        settled_metrics(gw, "prefixgate_api_key_tokens_total", used, key="small")
        status, headers, body = gw.chat("again", headers=bearer(SECRET_A))
        assert status == 429
        assert "tokens_per_minute" in error_of(body)["message"]
        # (used - 20) tokens of debt refill at 20 a minute.
        assert int(headers["retry-after"]) == pytest.approx((used - 20) * 60 / 20, abs=2)
        metrics = gw.metrics_text()
        assert sample(metrics, "prefixgate_api_key_rate_limited_total", key="small", limit="tokens") == 1
    finally:
        gw.stop()
        sim.stop()


def test_streams_without_usage_are_charged_the_gateways_prompt_count(tmp_path):
    """A stream without stream_options.include_usage carries no usage: it is charged the gateway's count of its
    prompt plus its chunks, so large streamed prompts use up tokens_per_minute and the next request gets 429 (issue
    24: ten streamed 25k-token prompts were charged 20 tokens in all). A stream with usage is charged its usage."""
    sim = Sim(tmp_path, "engine-0")
    keys_file = tmp_path / "keys.yaml"
    write_keys(keys_file, [{"name": "streamer", "key": SECRET_A, "tokens_per_minute": 20000}])
    gw = Gateway(tmp_path, [sim], config={"auth": {"api_keys_file": str(keys_file)}})
    prompt = "lorem ipsum dolor sit amet " * 1200  # 32,400 bytes: about 8,100 tokens (the simulator: 4 bytes each)

    def charged():
        return sample(gw.metrics_text(), "prefixgate_api_key_tokens_total", key="streamer") or 0

    try:
        # With usage: charged exactly what the engine reported, not the gateway's count on top.
        status, _, body = gw.chat("0 " + prompt, max_tokens=4, stream=True, headers=bearer(SECRET_A),
                                  stream_options={"include_usage": True})
        assert status == 200
        usage = [json.loads(e)["usage"] for e in sse_events(body) if e != "[DONE]" and json.loads(e).get("usage")][-1]
        used = usage["prompt_tokens"] + usage["completion_tokens"]
        settled_metrics(gw, "prefixgate_api_key_tokens_total", used, key="streamer")
        statuses = []
        for i in range(1, 10):
            before = charged()
            status, _, body = gw.chat(f"{i} {prompt}", max_tokens=4, stream=True, headers=bearer(SECRET_A))
            statuses.append(status)
            if status != 200:
                break
            assert b'"usage"' not in body
            # Charged just after the response's last byte: wait for it rather than race the next request.
            wait_until(lambda: charged() > before, timeout=3, what="the stream charged")
            assert charged() - before >= 8000
        assert statuses == [200, 200, 429], (statuses, charged())
        assert charged() >= 3 * 8000
    finally:
        gw.stop()
        sim.stop()


@pytest.mark.parametrize("forward", [False, True])
def test_the_engine_sees_the_clients_key_only_with_forward_authorization(tmp_path, forward):
    """The gateway's client key is removed from the request to the engine unless auth.forward_authorization."""
    sim = Sim(tmp_path, "engine-0")
    keys_file = tmp_path / "keys.yaml"
    write_keys(keys_file, [{"name": "team-a", "key": SECRET_A}])
    gw = Gateway(tmp_path, [sim], config={"auth": {"api_keys_file": str(keys_file), "forward_authorization": forward}})
    try:
        assert gw.chat("hello", headers={**bearer(SECRET_A), "x-custom": "kept"})[0] == 200
        [seen] = sim.completions_seen()
        assert seen["headers"]["x-custom"] == "kept"
        if forward:
            assert seen["headers"]["authorization"] == f"Bearer {SECRET_A}"
        else:
            assert "authorization" not in seen["headers"]
    finally:
        gw.stop()
        sim.stop()


def test_the_key_name_is_logged_and_counted_and_the_key_never_appears(keyed):
    """The request log line carries key=<name>; /metrics counts requests per key name and status; the secret is in
    neither, nor in /debug/pods or an error body."""
    gw, _, _ = keyed
    assert gw.chat("hello", headers=bearer(SECRET_A))[0] == 200
    _, _, forbidden = gw.chat("hello", model="other-model", headers=bearer(SECRET_A))
    _, _, unknown = gw.chat("hello", headers=bearer(SECRET_A[:-1]))
    # Each request is counted just after its last byte, on its own connection's thread: wait for both.
    settled_metrics(gw, "prefixgate_api_key_requests_total", 1, key="team-a", status="200")
    metrics = settled_metrics(gw, "prefixgate_api_key_requests_total", 1, key="team-a", status="403")
    assert sample(metrics, "prefixgate_api_key_requests_total", key="team-a", status="200") == 1
    assert sample(metrics, "prefixgate_api_key_unauthenticated_total", reason="unknown") == 1
    log = log_containing(gw, "status=403")
    assert any("key=team-a" in line and "status=200" in line for line in log.splitlines())
    debug = gw.admin("GET", "/debug/pods")[2].decode()
    for text in (log, metrics, debug, forbidden.decode(), unknown.decode()):
        assert SECRET_A not in text and SECRET_A[:-1] not in text


def test_a_rewritten_keys_file_takes_effect_and_a_broken_one_keeps_the_last_good_keys(keyed):
    """Rewriting the keys file changes the keys within ~2 s without a restart, team-a's spent allowance survives
    the reload (same name), and a broken rewrite is logged naming the file, entry and field while the keys in force
    stay."""
    gw, _, keys_file = keyed
    for i in range(3):
        assert gw.chat(f"request {i}", headers=bearer(SECRET_A))[0] == 200
    new_secret = "sk-team-c-00000000000000"
    write_keys(keys_file, [
        {"name": "team-a", "key": SECRET_A, "models": ["sim-model"], "requests_per_minute": 3},
        {"name": "team-c", "key": new_secret},
    ])
    deadline = time.monotonic() + 2.5
    wait_until(lambda: gw.chat("new key", headers=bearer(new_secret))[0] == 200, timeout=2.5, interval=0.1,
               what="the new key to work")
    assert time.monotonic() < deadline
    assert gw.chat("removed", headers=bearer(SECRET_B))[0] == 401
    assert gw.chat("still limited", headers=bearer(SECRET_A))[0] == 429

    # A duplicate name and a zero limit: the whole file is refused.
    write_keys(keys_file, [
        {"name": "team-c", "key": "sk-replacement-0000000"},
        {"name": "team-c", "key": "sk-other-00000000000", "tokens_per_minute": 0},
    ])
    # One warning per problem: wait for the last one written (the per-entry check comes before the duplicates').
    log = log_containing(gw, "duplicate name")
    assert "API keys file ignored" in log
    assert f"{keys_file}: keys[1] (team-c).name: duplicate name" in log
    assert "keys[1] (team-c).tokens_per_minute: must be greater than 0" in log
    assert "sk-replacement" not in log and "sk-other" not in log
    assert gw.chat("old key still in force", headers=bearer(new_secret))[0] == 200
    assert gw.chat("never took effect", headers={"authorization": "Bearer sk-replacement-0000000"})[0] == 401


def test_check_reports_a_bad_keys_file_without_printing_keys(tmp_path):
    """`prefixgate --check` fails on a keys file with a duplicate key, naming the file, both entries and the field,
    never the key; a good file passes."""
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: []\n")
    keys_file = tmp_path / "keys.yaml"
    write_keys(keys_file, [{"name": "a", "key": SECRET_A}, {"name": "b", "key": SECRET_A}])
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump({"discovery": {"file": "pods.yaml"}, "auth": {"api_keys_file": "keys.yaml"}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIBRIX_", "ROUTING_ALGORITHM"))}
    run = subprocess.run([GATEWAY_BIN, "--config", str(config), "--check"], capture_output=True, text=True, env=env,
                         timeout=30)
    assert run.returncode == 1
    assert f"{keys_file}: keys[1] (b).key: the same key as keys[0] (a)" in run.stderr
    assert SECRET_A not in run.stderr + run.stdout
    write_keys(keys_file, [{"name": "a", "key": SECRET_A}, {"name": "b", "key": SECRET_B}])
    run = subprocess.run([GATEWAY_BIN, "--config", str(config), "--check"], capture_output=True, text=True, env=env,
                         timeout=30)
    assert run.returncode == 0, run.stderr
