"""Item 2: accepted HTTP connections have TCP_NODELAY, so a response written in two pieces
(head, body) is not held back by Nagle's algorithm waiting on the client's delayed ACK (~40 ms
per keep-alive request). Checked on the server's own accepted socket, found by its addresses;
the latency itself is measured by bench/bench_service.py, not asserted here."""

from __future__ import annotations

import gc
import socket
import threading

from reweighter.config import Settings
from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService


class NeverLoads(ReweightEngine):
    """The real engine, whose model load waits for the test to end and then gives up: the
    transport under test needs no model."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.done = threading.Event()

    def load(self) -> None:
        self.done.wait(60)
        raise RuntimeError("not loaded: a transport-only test")


def _server_side(port: int, peer: tuple[str, int]) -> socket.socket:
    for obj in gc.get_objects():
        if isinstance(obj, socket.socket) and obj.family == socket.AF_INET and obj.fileno() != -1:
            try:
                if obj.getsockname()[1] == port and obj.getpeername()[:2] == peer:
                    return obj
            except OSError:
                continue
    raise AssertionError("the server's accepted socket was not found")


def test_accepted_http_connections_have_tcp_nodelay() -> None:
    settings = Settings(host="127.0.0.1", http_port=0, grpc_port=0)
    engine = NeverLoads(settings)
    svc = BackgroundService(settings, engine).start()
    try:
        port = svc.service.http_port
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            accepted = _server_side(port, client.getsockname()[:2])
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        engine.done.set()
        svc.stop(grace=1)
