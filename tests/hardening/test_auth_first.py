"""Item 5: the key is checked before a body is read, and an oversized body is refused (413)
by its Content-Length or while it streams, before anything parses it.

Raw sockets, so the test controls how much of the body is ever sent: the answer must arrive
while most of the declared body is still unsent."""

from __future__ import annotations

import json
import socket
import time

from .conftest import AUTH, Served, error_shape


def _head(served: Served, length: int | None, auth: bool, path: str = "/v1/reweight") -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"host: 127.0.0.1:{served.http_port}"]
    lines.append("content-type: application/json")
    lines.append(
        f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    )
    if auth:
        lines.append(f"authorization: {AUTH['authorization']}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(sock: socket.socket, timeout: float) -> bytes:
    """The response head and what body has arrived within `timeout` s (b"" if none)."""
    sock.settimeout(0.2)
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if b"\r\n\r\n" in got:
                break
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
    return got


def _status(raw: bytes) -> int:
    assert raw.startswith(b"HTTP/1.1 "), raw[:200]
    return int(raw.split(b" ", 2)[1])


def _body(raw: bytes) -> bytes:
    return raw.split(b"\r\n\r\n", 1)[1]


def test_unauthenticated_big_body_is_refused_before_it_is_read(keyed: Served) -> None:
    declared = 8 * 2**20  # under the body limit, far over what we send
    with socket.create_connection(("127.0.0.1", keyed.http_port)) as sock:
        sock.sendall(_head(keyed, declared, auth=False))
        sock.sendall(b'{"groups": [' + b" " * 65536)
        raw = _answer(sock, timeout=5.0)
    assert raw, "no answer while the body was still streaming: the key is checked after reading"
    assert _status(raw) == 401
    assert error_shape(json.loads(_body(raw)))["type"] == "Unauthenticated"


def test_oversized_body_is_refused_by_content_length_and_while_streaming(keyed: Served) -> None:
    with socket.create_connection(("127.0.0.1", keyed.http_port)) as sock:
        sock.sendall(_head(keyed, 1 << 40, auth=True))
        raw = _answer(sock, timeout=5.0)
    assert _status(raw) == 413
    # chunked: no length up front; the server counts and stops at the limit
    with socket.create_connection(("127.0.0.1", keyed.http_port)) as sock:
        sock.sendall(_head(keyed, None, auth=True))
        chunk = b" " * (1 << 20)
        frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        sent, raw = 0, b""
        sock.settimeout(5)
        try:
            for _ in range(1024):  # up to 1 GiB; the limit is far below
                sock.sendall(frame)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        raw = _answer(sock, timeout=5.0)
    assert raw and _status(raw) == 413, f"sent {sent} bytes"
    assert sent < 512 * 2**20, f"the server drained {sent} bytes after refusing"
