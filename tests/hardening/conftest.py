"""`reweighter serve` as a child process on loopback, as an attacker or a heavy user sees it.

A child (not a BackgroundService) so that floods, signals and RSS belong to the service alone
and the load generator does not share its interpreter. Settings go in as REWEIGHTER_* variables:
an unknown variable is ignored, so a test of a limit that does not exist yet fails on behaviour,
not on start-up.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import RedisServer, free_port

from reweighter.launch import Served, serve

API_KEY = "hardening-key"
AUTH = {"authorization": f"Bearer {API_KEY}"}
REDIS_PASSWORD = "s3cret-hardening-pw"

# Small enough that a max-size request encodes in seconds here (the fairness test sends one).
KEYED_MAX_CHARS = 30_000
KEYED_MAX_COMPLETIONS = 512  # with max_chars, a body limit of ~14 MB
KEYED_GRACE_S = 2.0
KEYED_NOFILE = 256
KEYED_TIMEOUT_S = 2.0


@pytest.fixture(scope="package")
def private_redis() -> Iterator[RedisServer]:
    """A password-protected Redis of the package's own (the shared one has no password)."""
    server = RedisServer(free_port(), password=REDIS_PASSWORD).start()
    yield server
    server.stop()


def start_keyed(redis: RedisServer) -> Served:
    """A `reweighter serve` with the package's settings: an API key, a password-protected
    private Redis, 2 s read deadlines, 256 file descriptors, the eager encoder with
    `long_text=chunk_mean`, small request limits and a 2 s shutdown grace. Starting one costs
    10-40 s on this machine."""
    return serve(
        "--shutdown-grace",
        str(KEYED_GRACE_S),
        nofile=KEYED_NOFILE,
        timeout=120,
        settings={
            "api_key": API_KEY,
            "max_chars": KEYED_MAX_CHARS,
            "max_completions": KEYED_MAX_COMPLETIONS,
            "redis_url": redis.url,
            "header_timeout_s": KEYED_TIMEOUT_S,
            "body_timeout_s": KEYED_TIMEOUT_S,
            "keepalive_timeout_s": KEYED_TIMEOUT_S,
            "compile": "off",  # no background compile competing for the CPU and descriptors
            # the policy whose cost grows with length: a max-size completion is seconds of
            # encoding (every window), the worst case the fairness and shutdown probes need;
            # under the default `spread` it is 4 windows, over in a moment
            "long_text": "chunk_mean",
            # fuzzed members of a group that never fills (/v1/groups, /v1/openrlhf) wait this
            "assembly_max_timeout_s": 3,
        },
    )


@pytest.fixture(scope="package")
def keyed(private_redis: RedisServer) -> Iterator[Served]:
    """One `start_keyed` service shared by the package's tests; none of them stops it or
    leaves it busy, so they may run in any order."""
    with start_keyed(private_redis) as served:
        yield served


def error_shape(body: object) -> dict:
    """The documented error body {error: {message, field, type}}; fails the test otherwise."""
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"message", "field", "type"}, body
    assert isinstance(err["message"], str) and err["message"], body
    assert err["field"] is None or isinstance(err["field"], str), body
    assert isinstance(err["type"], str), body
    return err
