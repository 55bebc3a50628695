"""The harness's RedisServer (loadtest/harness.py), which the state sync tests and the multi-replica benchmark start:
a real redis-server on loopback, spoken to in RESP over a raw socket."""
import socket
import time

import pytest

from harness import RedisError, RedisServer


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


def test_commands_round_trip_every_reply_kind(redis):
    """Ensures command() sends a RESP command and decodes status, bulk, integer, nil, array and error replies, and
    that the server is the one .url names, on loopback."""
    assert redis.url == f"redis://127.0.0.1:{redis.port}"
    assert redis.command("SET", "key", "value") == "OK"
    assert redis.command("GET", "key") == b"value"
    assert redis.command("INCRBY", "n", 41) == 41
    assert redis.command("GET", "absent") is None
    assert redis.command("RPUSH", "list", "a", b"b\r\nc") == 2
    assert redis.command("LRANGE", "list", 0, -1) == [b"a", b"b\r\nc"]
    with pytest.raises(RedisError, match="wrong kind of value"):
        redis.command("GET", "list")
    assert redis.command("CONFIG", "GET", "save") == [b"save", b""]   # no persistence
    assert redis.used_memory() > 100_000


def test_restart_keeps_the_port_and_starts_empty(redis):
    """Ensures restart() brings Redis back on the same port (a gateway's configured URL stays valid) without the
    data (no persistence)."""
    port = redis.port
    redis.command("SET", "key", "value")
    redis.restart()
    assert redis.port == port and redis.command("PING") == "PONG"
    assert redis.command("GET", "key") is None


def test_kill_stops_answering_and_sleep_stalls_without_waiting(redis):
    """Ensures sleep() returns at once while Redis stalls for the time given, and kill() leaves nothing listening
    on the port."""
    started = time.monotonic()
    redis.sleep(0.5)
    assert time.monotonic() - started < 0.3
    assert redis.command("PING") == "PONG"
    assert time.monotonic() - started >= 0.45
    redis.kill()
    assert redis.proc.poll() is not None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", redis.port), timeout=1).close()
