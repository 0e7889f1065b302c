"""`reweighter.client.connect`: one factory from a URL to a client, one protocol, one set of
defaults; and how the HTTP client reports a silent or absent service (real sockets)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from reweighter.client import (
    DEFAULT_TIMEOUT_S,
    GrpcReweighterClient,
    LocalClient,
    RetryPolicy,
    Reweighter,
    ReweighterClient,
    connect,
)
from reweighter.errors import ConnectionFailed, ReweighterError


@pytest.mark.parametrize(
    ("url", "cls"),
    [
        ("http://127.0.0.1:9", ReweighterClient),
        ("https://example.invalid/prefix", ReweighterClient),
        ("grpc://127.0.0.1:9", GrpcReweighterClient),
        ("grpcs://127.0.0.1:9", GrpcReweighterClient),
        ("inprocess", LocalClient),
        ("inprocess://", LocalClient),
    ],
)
def test_each_scheme_gives_its_client_with_the_one_protocol(url: str, cls: type) -> None:
    with connect(url) as client:  # nothing is contacted or loaded until the first call
        assert type(client) is cls
        assert isinstance(client, Reweighter)
        if cls is not LocalClient:
            assert client.aio.timeout == DEFAULT_TIMEOUT_S
        else:
            assert client.aio._engine is None  # the engine is built on first use only


def test_timeout_and_path_prefix_are_kept() -> None:
    with connect("http://127.0.0.1:9/rw/", timeout_s=7) as client:
        assert (client.aio.base_url, client.aio.timeout) == ("http://127.0.0.1:9/rw", 7.0)
    with connect("grpc://127.0.0.1:9", timeout_s=3) as client:
        assert client.aio.timeout == 3.0


def test_an_unknown_scheme_is_named() -> None:
    with pytest.raises(ValueError, match=r"reweighter url 'ftp://x': expected http://host:port"):
        connect("ftp://x")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A server that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    for s in [*held, srv]:
        s.close()


def test_no_answer_in_time_is_a_deadline_and_is_not_retried(silent_port: int) -> None:
    retry = RetryPolicy(retries=3, backoff=0.01)
    with connect(f"http://127.0.0.1:{silent_port}", timeout_s=0.5, retry=retry) as client:
        t0 = time.monotonic()
        with pytest.raises(ReweighterError, match="no answer within 0.5 s") as err:
            client.info()
        assert time.monotonic() - t0 < 1.5  # one attempt, not four
    assert (err.value.http_status, err.value.grpc_code) == (504, "DEADLINE_EXCEEDED")


def test_nobody_listening_is_connection_failed_after_retries() -> None:
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    retry = RetryPolicy(retries=2, backoff=0.01)
    with connect(f"http://127.0.0.1:{port}", retry=retry) as client:
        with pytest.raises(ConnectionFailed, match="GET /v1/info"):
            client.info()
        assert client.ready() is False
