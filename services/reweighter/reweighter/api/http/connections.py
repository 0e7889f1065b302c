"""The HTTP connection layer under hostile clients: a bound on open connections, read
deadlines for request heads and bodies, and TCP_NODELAY on every accepted socket.

uvicorn's h11 protocol has a keep-alive timeout but no deadline for a request head that never
completes, and no bound on connections, so a few thousand idle sockets exhaust descriptors.
`guarded_protocol` returns an H11Protocol subclass bound to one `ConnectionGuard`:

- TCP_NODELAY: asyncio only sets it on sockets created with proto=IPPROTO_TCP, and a socket
  accepted from one bound with proto 0 does not qualify; without it a response written as head +
  body waits for the client's delayed ACK (~40 ms per keep-alive request).
- head deadline: a connection must deliver a complete request head within `header_timeout_s` of
  opening (or of its previous response), however slowly it trickles bytes in;
- body deadline: the body must arrive within `body_timeout_s` of its head;
- health first: a complete `GET /healthz` or `GET /readyz` head on an idle keep-alive
  connection is answered here, in the callback that read its bytes, with the app's own answer
  (`probe_answer`, which router.py's routes serve too; tests/assembly/test_health_connection.py
  holds the two to the same bytes).
  Through the app the probe would be a task run in a later loop iteration, behind every
  callback that the assembly flood has made ready by then: each iteration under a flood is
  long, and the probe waited two or more of them (issue 29: 2.1 s on a loaded machine, where
  the liveness probe gives up at 3 s). Here it waits for none: the socket is read, answered and
  written in one callback, whatever the loop has queued behind it.
- bound: at `max_connections` open connections, a new one closes the oldest connection that has
  no request in progress (idle keep-alive, or a head still arriving): a flood of idle sockets
  cannot lock out /healthz or real clients. When every connection is busy, the new one gets a
  429 and is closed. Busy connections (a request being served, e.g. waiting on group assembly)
  are never evicted, so the bound is also how many requests may wait at once.

This subclasses uvicorn's H11Protocol and reads members uvicorn does not promise to keep
(`UVICORN_MEMBERS`): pyproject pins uvicorn to the range tested here, and `guarded_protocol`
refuses to start (naming the member and that range) on a uvicorn where one of them moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import resource
import socket
from collections.abc import Callable
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

log = logging.getLogger(__name__)

# Descriptors kept for everything but HTTP connections: gRPC, the model's files, Redis, logs.
DESCRIPTOR_RESERVE = 128
ACCEPT_BACKLOG = 2048  # uvicorn's default
"""asyncio accepts up to `backlog` sockets per wake-up before any of them is admitted (or
evicts another), so the descriptors must also cover two such bursts."""


def connection_limits(requested: int) -> tuple[int, int]:
    """(connection bound, accept backlog): `requested`, lowered to fit the process's descriptor
    limit (raised to its hard limit first), since running out of descriptors turns every
    accept() into an error and starves /healthz."""
    want = requested + DESCRIPTOR_RESERVE + 2 * ACCEPT_BACKLOG
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
    if soft == resource.RLIM_INFINITY or soft >= want:
        return requested, ACCEPT_BACKLOG
    usable = max(16, soft - DESCRIPTOR_RESERVE)
    backlog = max(8, min(ACCEPT_BACKLOG, usable // 8))
    bound = max(1, min(requested, usable - 2 * backlog))
    if bound < requested:
        log.warning(
            "max_connections %d lowered to %d: the process may open %d files (ulimit -n)",
            requested,
            bound,
            soft,
        )
    return bound, backlog


def _refusal(status: int, reason: str, message: str, kind: str) -> bytes:
    body = json.dumps({"error": {"message": message, "field": None, "type": kind}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


HEALTH_PATHS = (b"/healthz", b"/readyz")
_NOT_A_PROBE = (b"content-length", b"transfer-encoding", b"expect", b"upgrade")


def probe_answer(path: str, ready: bool) -> tuple[int, str, dict[str, str]]:
    """The one definition of the health probes' answers, (status, `status` field of the JSON
    body, extra headers): GET /healthz is alive; GET /readyz is ready, or loading (503, retry
    after 1 s) until the engine is `ready`. router.py's routes and `health_answer` serve it."""
    if path == "/healthz":
        return 200, "ok", {}
    if ready:
        return 200, "ready", {}
    return 503, "loading", {"retry-after": "1"}


_REASONS = {200: b"OK", 503: b"Service Unavailable"}


def health_answer(path: bytes, ready: bool, close: bool, extra: list[tuple[bytes, bytes]]) -> bytes:
    """`probe_answer` as the bytes the app writes (the same status, headers and JSON)."""
    code, state, more_headers = probe_answer(path.decode(), ready)
    status = b"%d %s" % (code, _REASONS[code])
    body = json.dumps({"status": state}, separators=(",", ":")).encode()
    more = [(k.encode(), v.encode()) for k, v in more_headers.items()]
    headers = [*extra, (b"content-length", str(len(body)).encode()),
               (b"content-type", b"application/json"), *more]  # fmt: skip
    if close:
        headers.append((b"connection", b"close"))
    head = b"".join(b"%s: %s\r\n" % (k, v) for k, v in headers)
    return b"HTTP/1.1 " + status + b"\r\n" + head + b"\r\n" + body


def health_request(data: bytes) -> tuple[bytes, bool] | None:
    """(path, close) when `data` is exactly one complete `GET /healthz|/readyz HTTP/1.1` head
    with no body; None for anything else (the app answers it)."""
    if not data.startswith(b"GET /") or not data.endswith(b"\r\n\r\n"):
        return None
    if data.count(b"\r\n\r\n") != 1 or len(data) > 8192:
        return None
    line, _, rest = data.partition(b"\r\n")
    parts = line.split(b" ")
    if len(parts) != 3 or parts[1] not in HEALTH_PATHS or parts[2] != b"HTTP/1.1":
        return None
    close = False
    for header in rest[:-4].split(b"\r\n") if rest[:-4] else []:
        raw, sep, value = header.partition(b":")
        name, value = raw.lower(), value.strip().lower()
        if not sep or not name or name != name.strip():  # h11 would refuse it: let it
            return None
        if name in _NOT_A_PROBE and (name, value) != (b"content-length", b"0"):
            return None  # a body, or more than a plain request: the app's
        if name == b"connection" and b"close" in value:
            close = True
    return parts[1], close


class ConnectionGuard:
    """Open connections of one HTTP server, oldest first, and the limits they live under;
    `ready` (the engine's readiness), when given, lets the connections answer the health
    probes themselves (see the module docstring)."""

    def __init__(
        self,
        max_connections: int,
        header_timeout_s: float,
        body_timeout_s: float,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.ready = ready
        self.open: dict[GuardedProtocol, None] = {}  # insertion order = age
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0
        self.health_answered = 0

    def admit(self, conn: GuardedProtocol) -> bool:
        if len(self.open) >= self.max_connections:
            victim = next((c for c in self.open if c.idle), None)
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            self.release(victim)
            victim.transport.close()
        self.open[conn] = None
        return True

    def release(self, conn: GuardedProtocol) -> None:
        self.open.pop(conn, None)


class GuardedProtocol(H11Protocol):
    """H11Protocol with TCP_NODELAY, head/body deadlines and the connection bound."""

    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._phase: tuple[str, int] | None = None

    @property
    def idle(self) -> bool:
        """No request in progress: nothing is lost by closing it."""
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):  # the peer already went away
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
        if not self.guard.admit(self):
            self.connections.discard(self)
            transport.write(
                _refusal(429, "Too Many Requests", "too many open connections; retry", "Overloaded")
            )
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.release(self)
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.guard.ready is not None and self._answer_health(data):
            return
        super().data_received(data)
        self._arm()

    def _answer_health(self, data: bytes) -> bool:
        """Answer a health probe now, when the connection is between requests and `data` is
        exactly one probe's head; False (nothing done) otherwise. h11 never sees these bytes,
        and its state stays IDLE for the connection's next request."""
        conn = self.conn
        if not (self.idle and conn.our_state is h11.IDLE and conn.their_state is h11.IDLE):
            return False
        if conn.trailing_data[0]:  # part of another request is buffered: keep the order
            return False
        probe = health_request(data)
        if probe is None:
            return False
        path, close = probe
        assert self.guard.ready is not None
        self.guard.health_answered += 1
        self.server_state.total_requests += 1
        extra = list(self.server_state.default_headers)
        self.transport.write(health_answer(path, self.guard.ready(), close, extra))
        if close:
            self.transport.close()
            return True
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )
        self._disarm()  # a new head deadline: the next request starts now
        self._arm()
        return True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    # -- deadlines ---------------------------------------------------------------------------

    def _arm(self) -> None:
        """Start the deadline of the phase the connection is in, unless it is already running:
        trickling bytes does not extend a deadline."""
        if self.transport is None or self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            phase: tuple[str, int] | None = ("head", id(cycle))
        elif cycle.more_body:
            phase = ("body", id(cycle))
        else:
            phase = None  # the request is complete: the app works on it, no read deadline
        if phase == self._phase:
            return
        self._disarm()
        self._phase = phase
        if phase is not None:
            g = self.guard
            delay = g.header_timeout_s if phase[0] == "head" else g.body_timeout_s
            self._timer = self.loop.call_later(delay, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase = None

    def _expire(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        self.guard.timed_out += 1
        if self.idle:  # a head still arriving (or an idle keep-alive): just close
            self.transport.write(
                _refusal(408, "Request Timeout", "request head not received in time", "Timeout")
            )
        self.transport.close()


UVICORN_TESTED = ">=0.54,<0.55"
"""The uvicorn versions GuardedProtocol is tested on: pyproject pins the server extra to it."""
UVICORN_MEMBERS: dict[type, tuple[str, ...]] = {
    H11Protocol: (
        "cycle", "conn", "server_state", "transport", "loop", "connections",
        "timeout_keep_alive", "timeout_keep_alive_task", "timeout_keep_alive_handler",
        "_unset_keepalive_if_required", "on_response_complete", "data_received",
        "connection_made", "connection_lost",
    ),
    RequestResponseCycle: ("response_complete", "more_body"),
}  # fmt: skip
"""What GuardedProtocol reads of uvicorn beyond its public API: members of these classes (set
as `self.<name>` in their source, or defined on them)."""


def moved_uvicorn_members() -> list[str]:
    """The members of UVICORN_MEMBERS that their classes no longer have: [] on a tested
    uvicorn."""
    moved = []
    for cls, names in UVICORN_MEMBERS.items():
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            source = ""
        for name in names:
            if not hasattr(cls, name) and f"self.{name} =" not in source:
                moved.append(f"{cls.__name__}.{name}")
    return moved


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedProtocol]:
    """An H11Protocol class bound to `guard`, for uvicorn.Config(http=...); refuses a uvicorn
    whose internals moved (a RuntimeError naming them), rather than misbehaving under load."""
    moved = moved_uvicorn_members()
    if moved:
        raise RuntimeError(
            f"uvicorn {uvicorn.__version__} lacks {', '.join(moved)}, which the connection "
            f"guard (reweighter/api/http/connections.py) reads: install uvicorn{UVICORN_TESTED}"
        )
    return type("GuardedH11Protocol", (GuardedProtocol,), {"guard": guard})
