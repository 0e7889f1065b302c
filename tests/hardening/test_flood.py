"""Item 8: connection floods. Idle sockets and half-sent headers or bodies are closed within
their timeouts, concurrent connections are bounded (idle ones make room for new ones), running
out of file descriptors does not flood the log, and /healthz answers throughout.

Bounded: a few hundred loopback sockets against the shared service (2 s read deadlines, 256
file descriptors), each test well under 20 s."""

from __future__ import annotations

import re
import socket
import time

import httpx

from .conftest import AUTH, KEYED_NOFILE, KEYED_TIMEOUT_S, Served


def _connect(served: Served, send: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", served.http_port), timeout=5)
    if send:
        sock.sendall(send)
    return sock


def _closed(sock: socket.socket) -> bool:
    """True once the server has closed its end (EOF or reset), after whatever it sent."""
    sock.setblocking(False)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def _healthz(served: Served) -> float:
    start = time.perf_counter()
    response = httpx.get(served.url + "/healthz", timeout=3)
    assert response.status_code == 200
    return time.perf_counter() - start


def _wait_closed(socks: list[socket.socket], timeout: float) -> list[socket.socket]:
    deadline = time.monotonic() + timeout
    still = list(socks)
    while still and time.monotonic() < deadline:
        still = [s for s in still if not _closed(s)]
        time.sleep(0.1)
    return still


def _close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def test_idle_and_half_sent_requests_time_out_while_healthz_answers(keyed: Served) -> None:
    served = keyed
    head = f"POST /v1/reweight HTTP/1.1\r\nhost: 127.0.0.1:{served.http_port}\r\n".encode()
    # the key given: admission lets these bodies in, so only the body deadline can close them
    keyed_head = head + b"".join(f"{k}: {v}\r\n".encode() for k, v in AUTH.items())
    body_head = keyed_head + b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"
    chunked = (
        keyed_head
        + b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n1\r\n{\r\n"
    )
    # under the shared service's connection bound (96 at 256 descriptors): deadlines, not evictions
    idle = [_connect(served) for _ in range(60)]
    slow_head = [_connect(served, head) for _ in range(20)]
    slow_body = [_connect(served, body_head) for _ in range(5)]
    slow_body += [_connect(served, chunked) for _ in range(5)]
    try:
        latencies = [_healthz(served) for _ in range(5)]
        assert max(latencies) < 3.0
        # Every group gets the same bound: its deadline plus 5 s of slack. A deadline starts when
        # the server accepts the socket, and a burst of connects can overflow the small accept
        # backlog of this 256-descriptor server: the kernel drops the SYN and the client resends
        # it a second or more later, so the last sockets of a group start late.
        open_idle = _wait_closed(idle, timeout=KEYED_TIMEOUT_S + 5)
        open_head = _wait_closed(slow_head, timeout=KEYED_TIMEOUT_S + 5)
        open_body = _wait_closed(slow_body, timeout=KEYED_TIMEOUT_S + 5)
        assert (len(open_idle), len(open_head), len(open_body)) == (0, 0, 0)
        _healthz(served)
    finally:
        _close_all(idle + slow_head + slow_body)


def test_connections_are_bounded_below_the_descriptor_limit(keyed: Served) -> None:
    """With 256 descriptors and the default bound, 250 idle connections: the bound is clamped
    under the descriptor limit, idle connections make room for new clients (/healthz answers),
    and the log does not fill with accept() errors."""
    served = keyed
    log_from = len(served.log())
    socks = [_connect(served) for _ in range(250)]
    try:
        time.sleep(1.0)
        for _ in range(3):
            _healthz(served)
        still_open = _wait_closed(socks, timeout=1)
        assert len(still_open) < KEYED_NOFILE, f"{len(still_open)} of 250 connections held open"
        log = served.log()[log_from:]
        noisy = len(re.findall(r"Traceback|out of system resource|Too many open", log))
        assert noisy <= 5, log[-2000:]
    finally:
        _close_all(socks)
