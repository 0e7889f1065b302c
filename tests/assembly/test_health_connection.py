"""Health never waits on assembly (issue 29 point 3), from the inside: the connection layer
(api/http/connections.py) answers `GET /healthz` and `GET /readyz` in the callback that read
the probe, so a probe needs neither the app nor a later loop iteration. Loopback sockets, a real
uvicorn server with the service's protocol; bounded (a few requests, 10 s timeouts)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from packaging.specifiers import SpecifierSet
from uvicorn.protocols.http.h11_impl import H11Protocol

from reweighter.api.http import connections
from reweighter.api.http.connections import ConnectionGuard, GuardedConnection, health_request

PROBE = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer (status, headers without `date`, body) off a blocking socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        body += sock.recv(65536)
    headers.pop("date", None)
    return int(lines[0].split()[1]), headers, body


class _App:
    """An ASGI app that never answers /healthz or /readyz (it waits forever) and answers
    every other path with 200 "app": a probe answered at all was answered by the connection."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        with connections.on_connection(scope):  # as the service's admission does
            await self._answer(scope, receive, send)

    async def _answer(self, scope: dict, receive: Any, send: Any) -> None:
        self.paths.append(scope["path"])
        if scope["path"] in ("/healthz", "/readyz"):
            await asyncio.Event().wait()
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"3")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"app"})


@pytest.fixture
def guarded() -> Iterator[tuple[int, _App, ConnectionGuard, list[bool]]]:
    """A uvicorn server with the service's protocol on a loopback port, in its own thread."""
    app, ready = _App(), [False]
    guard = ConnectionGuard(64, 5.0, 5.0, ready=lambda: ready[0])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        http=guard.protocol(),
        lifespan="off",
        log_level="error",
        timeout_graceful_shutdown=1,
    )  # the app's probes never finish
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])),
                              daemon=True)  # fmt: skip
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    try:
        yield port, app, guard, ready
    finally:
        server.should_exit = True
        thread.join(10)


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def test_probes_are_answered_without_the_app_and_the_connection_goes_on(guarded: Any) -> None:
    port, app, guard, ready = guarded
    with _connect(port) as sock:
        sock.sendall(PROBE)
        assert _read_answer(sock)[::2] == (200, b'{"status":"ok"}')
        sock.sendall(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
        status, headers, body = _read_answer(sock)
        assert (status, headers["retry-after"], body) == (503, "1", b'{"status":"loading"}')
        ready[0] = True
        sock.sendall(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert _read_answer(sock)[::2] == (200, b'{"status":"ready"}')
        # the same keep-alive connection then carries a request to the app, body and all
        sock.sendall(b"POST /work HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        assert _read_answer(sock)[::2] == (200, b"app")
        sock.sendall(PROBE)  # and a probe after it
        assert _read_answer(sock)[0] == 200
    assert app.paths == ["/work"] and guard.health_answered == 4


def test_a_probe_asking_to_close_is_answered_then_closed(guarded: Any) -> None:
    port, _, guard, _ = guarded
    with _connect(port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        status, headers, _ = _read_answer(sock)
        assert (status, headers["connection"]) == (200, "close")
        assert sock.recv(1) == b""  # closed by the server
    assert guard.health_answered == 1


def test_anything_but_one_whole_probe_head_goes_to_the_app(guarded: Any) -> None:
    """A head in two packets, a probe with a body, a query string, a pipelined pair: the app
    gets them, in order (this app never answers a probe, so only the non-probe ones are read)."""
    port, app, guard, _ = guarded
    with _connect(port) as sock:
        sock.sendall(b"GET /work HTTP/1.1\r\nhost: x\r\n\r\n" + PROBE)  # pipelined: in order
        assert _read_answer(sock)[::2] == (200, b"app")
    for data in (b"GET /healthz?x=1 HTTP/1.1\r\nhost: x\r\n\r\n",
                 b"GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\nx"):  # fmt: skip
        with _connect(port) as sock:
            sock.sendall(data)
    with _connect(port) as sock:  # the head in two packets
        sock.sendall(PROBE[:10])
        time.sleep(0.2)
        sock.sendall(PROBE[10:])
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while len(app.paths) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert app.paths == ["/work", "/healthz", "/healthz", "/healthz", "/healthz"]
    assert guard.health_answered == 0


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (PROBE, (b"/healthz", False)),
        (b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", (b"/readyz", True)),
        (b"GET /readyz HTTP/1.1\r\n\r\n", (b"/readyz", False)),
        (b"GET /healthz HTTP/1.0\r\n\r\n", None),  # 1.0's keep-alive rules: the app's
        (b"HEAD /healthz HTTP/1.1\r\n\r\n", None),
        (b"GET /healthzz HTTP/1.1\r\n\r\n", None),
        (b"GET /healthz HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n", None),
        (b"GET /healthz HTTP/1.1\r\nhost : x\r\n\r\n", None),  # h11 refuses it: let it
        (PROBE + PROBE, None),
        (PROBE[:-2], None),
    ],
)
def test_what_counts_as_a_probe(data: bytes, expected: Any) -> None:
    assert health_request(data) == expected


def test_the_service_answers_probes_as_its_app_does(service: Any) -> None:
    """The real service: a probe answered by the connection and the same probe answered by
    the app (its head sent in two packets, so the connection passes it on) are the same
    answer, but for the date."""
    port = service.service.http_port
    guard = service.service.connections
    for path in (b"/healthz", b"/readyz"):
        probe = b"GET " + path + b" HTTP/1.1\r\nhost: x\r\n\r\n"
        before = guard.health_answered
        with _connect(port) as sock:
            sock.sendall(probe)
            direct = _read_answer(sock)
        assert guard.health_answered == before + 1
        with _connect(port) as sock:
            sock.sendall(probe[:8])
            time.sleep(0.2)
            sock.sendall(probe[8:])
            via_app = _read_answer(sock)
        assert guard.health_answered == before + 1
        assert direct == via_app, path


def test_uvicorn_is_the_tested_one_and_only_its_public_surface_is_used() -> None:
    """The guard holds uvicorn's protocol and passes it asyncio's callbacks: it subclasses
    nothing of uvicorn's and calls nothing on it but the asyncio.Protocol interface; pyproject
    pins the uvicorn range it is tested on, and uvicorn builds protocols with the keywords the
    guard forwards (`app_state` among them, which reaches each request's scope as `state`)."""
    assert uvicorn.__version__ in SpecifierSet(connections.UVICORN_TESTED)
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'"uvicorn{connections.UVICORN_TESTED}"' in pyproject
    assert not any(c.__module__.startswith("uvicorn") for c in GuardedConnection.__mro__)
    tree = ast.parse(Path(connections.__file__).read_text())
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "inner"
    }
    protocol = {"connection_made", "connection_lost", "data_received", "eof_received",
                "pause_writing", "resume_writing"}  # fmt: skip
    assert used and used <= protocol, used - protocol
    server = inspect.getsource(uvicorn.Server)
    assert "app_state=self.lifespan.state" in server  # the keyword the guard extends
    h11 = inspect.getsource(H11Protocol)
    assert '"state": self.app_state.copy()' in h11  # the ASGI lifespan-state copy


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
@pytest.mark.parametrize("ready", [True, False])
def test_probe_bytes_come_from_the_apps_answer(path: str, ready: bool) -> None:
    """The connection's bytes and the app's route serve one definition (probe_answer)."""
    code, state, headers = connections.probe_answer(path, ready)
    raw = connections.health_answer(path.encode(), ready, False, [])
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % code) and body == b'{"status":"%s"}' % state.encode()
    assert all(f"{k}: {v}".encode() in head for k, v in headers.items())
    assert (code, state) == ((200, "ok") if path == "/healthz" else
                             (200, "ready") if ready else (503, "loading"))  # fmt: skip
