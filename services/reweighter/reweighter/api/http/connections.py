"""The HTTP connection layer under hostile clients: a bound on open connections, read
deadlines for request heads and bodies, TCP_NODELAY on every accepted socket, and health
probes answered where their bytes are read.

uvicorn's h11 protocol has a keep-alive timeout but no deadline for a request head that never
completes, and no bound on connections, so a few thousand idle sockets exhaust descriptors.
`ConnectionGuard.protocol()` is the class for `uvicorn.Config(http=...)`, uvicorn's public way
to choose the protocol: a `GuardedConnection` that *holds* uvicorn's H11Protocol and passes it
every asyncio callback (composition through the asyncio.Protocol interface; no subclass, no
member of uvicorn read). Admission (admission.py, `on_connection`) tells each connection,
through the ASGI scope's `state` (the lifespan state uvicorn copies into every request's scope,
as the ASGI spec says), when its request reaches the app and when the app has answered.

- TCP_NODELAY: asyncio only sets it on sockets created with proto=IPPROTO_TCP, and a socket
  accepted from one bound with proto 0 does not qualify; without it a response written as head +
  body waits for the client's delayed ACK (~40 ms per keep-alive request).
- head deadline: a connection must deliver a complete request head within `header_timeout_s` of
  opening (or of its previous response), however slowly it trickles bytes in; the connection
  sees the head end (the first blank line) in the bytes it passes on.
- body deadline: a declared body (content-length) must arrive within `body_timeout_s` of its
  head, counted in the bytes passed on; a chunked body until admission has read it whole.
- health first: a complete `GET /healthz` or `GET /readyz` head on an idle connection is
  answered here, in the callback that read its bytes, with the app's own answer (`probe_answer`,
  which router.py's routes serve too; tests/assembly/test_health_connection.py holds the two to
  the same bytes). Through the app the probe would be a task run in a later loop iteration,
  behind every callback that the assembly flood has made ready by then: each iteration under a
  flood is long, and the probe waited two or more of them (issue 29: 2.1 s on a loaded machine,
  where the liveness probe gives up at 3 s). Here it waits for none. Only where the connection
  can account for every byte (each request's body exactly its content-length): after a chunked
  body or pipelined requests its probes go to the app, in order.
- bound: at `max_connections` open connections, a new one closes the oldest connection that has
  no request in progress (idle keep-alive, or a head still arriving): a flood of idle sockets
  cannot lock out /healthz or real clients. When every connection is busy, the new one gets a
  429 and is closed. Busy connections (a request being served, e.g. waiting on group assembly)
  are never evicted, so the bound is also how many requests may wait at once.
- gone: `scope["reweighter.gone"]` tells whether the request's connection was lost (the
  deadline's probe, reweighter.tenancy.Deadline): the work of a client that left is dropped.

What this relies on of uvicorn: the keywords it builds a protocol with (`config`,
`server_state`, `app_state`, `_loop`; forwarded as given) and that each request's scope gets a
copy of `app_state` as `state`. pyproject pins uvicorn to the tested range, and
tests/assembly/test_health_connection.py checks both on the installed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import socket
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from starlette.types import Scope
from uvicorn.protocols.http.h11_impl import H11Protocol

from ...errors import Overloaded, ReweighterError
from .errors import error_bytes

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


CONNECTION = "reweighter.connection"
"""The key under which each request's scope `state` carries its GuardedConnection."""


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
        self.open: dict[GuardedConnection, None] = {}  # insertion order = age
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0
        self.health_answered = 0

    def protocol(self) -> type[GuardedConnection]:
        """The class for `uvicorn.Config(http=...)`, bound to this guard."""
        return type("GuardedConnection", (GuardedConnection,), {"guard": self})

    def admit(self, conn: GuardedConnection) -> bool:
        if len(self.open) >= self.max_connections:
            victim = next((c for c in self.open if c.idle), None)
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            self.release(victim)
            victim.close()
        self.open[conn] = None
        return True

    def release(self, conn: GuardedConnection) -> None:
        self.open.pop(conn, None)


_TOO_MANY = error_bytes(
    Overloaded("too many open connections; retry"), "Too Many Requests", "Overloaded"
)
_TOO_SLOW = error_bytes(
    ReweighterError("request head not received in time", http_status=408),
    "Request Timeout",
    "Timeout",
)
_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 65536
"""Past this many bytes without a blank line the head is h11's to refuse (it does, at 16 KiB)."""


class GuardedConnection(asyncio.Protocol):
    """One HTTP connection: uvicorn's H11Protocol inside, every asyncio callback passed to it,
    with the deadlines, the bound, TCP_NODELAY and the probes around it.

    What it knows it reads off the bytes it passes on (where a head ends, how long its body is)
    and off admission (`on_connection`: the app has the request, the app has answered);
    nothing of uvicorn's."""

    guard: ClassVar[ConnectionGuard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("config", args[0] if args else None)
        state = dict(kwargs.get("app_state") or {})
        state[CONNECTION] = self
        kwargs["app_state"] = state
        self.inner = H11Protocol(*args, **kwargs)
        self.keep_alive_s = float(getattr(config, "timeout_keep_alive", 5))
        self.default_headers = _default_headers(config)
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.head = bytearray()  # the bytes of a head still arriving
        self.in_request = False  # a head came; its response is not written yet
        self.exact = True  # every byte accounted for: the next bytes start a head
        self.body_left: int | None = 0  # declared body bytes still to come (None: chunked)
        self.chunked = False
        self.lost = False
        self.served = False  # admitted and passed to uvicorn
        self._timer: asyncio.TimerHandle | None = None

    # -- the asyncio.Protocol interface, passed on -------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):  # the peer already went away
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.guard.admit(self):
            transport.write(_TOO_MANY)
            transport.close()
            return
        self.served = True
        self.inner.connection_made(transport)
        self._arm(self.guard.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.guard.release(self)
        self._disarm()
        if self.served:  # refused at the door, uvicorn never had it
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.served:
            return
        if not self.in_request and self.exact:
            if not self.head and self.guard.ready is not None and self._answer_probe(data):
                return
            self._read_head(data)
        elif self.in_request and self.exact and self.body_left:
            self._read_body(len(data))
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.served else None

    def pause_writing(self) -> None:
        if self.served:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.served:
            self.inner.resume_writing()

    # -- what the connection reads off the bytes ---------------------------------------------

    @property
    def idle(self) -> bool:
        """No request in progress: nothing is lost by closing it."""
        return not self.in_request

    def gone(self) -> bool:
        """Whether the client has gone (the request's `Deadline` probe)."""
        return self.lost

    def _read_head(self, data: bytes) -> None:
        """Find where the head ends; past it, the head's declared body is counted off."""
        scan_from = max(0, len(self.head) - 3)
        self.head += data
        end = self.head.find(_HEAD_END, scan_from)
        if end < 0:
            if len(self.head) > _MAX_HEAD:
                self.exact = False  # h11 refuses such a head; stop keeping it
                self.head.clear()
            return
        head, rest = bytes(self.head[: end + 4]), len(self.head) - end - 4
        self.head.clear()
        self.in_request = True
        self.body_left = _declared_body(head)
        self.chunked = self.body_left is None
        if self.body_left == 0:
            self._disarm()  # no body: the app works on it, no read deadline
        else:
            self._arm(self.guard.body_timeout_s, restart=True)
        if rest:
            self._read_body(rest)

    def _read_body(self, n: int) -> None:
        if self.body_left is None:
            return
        self.body_left -= n
        if self.body_left < 0:  # more than this request: pipelined; stop accounting
            self.exact = False
        if self.body_left <= 0:
            self._disarm()

    def body_read(self) -> None:
        """The app has read the request's whole body: a chunked body's deadline ends here (the
        connection cannot count a chunked body off the bytes)."""
        self.body_left = 0
        self._disarm()

    # -- what admission tells it (`on_connection`) ---------------------------------------

    def request_started(self) -> None:
        if not self.in_request:  # after pipelining: the head was not seen in the bytes
            self.in_request = True
            self.body_left, self.chunked = 0, False
            self._disarm()

    def request_done(self) -> None:
        """The app has answered: the next bytes are the next head (if every byte of this
        request was counted off), and its deadline starts now."""
        if self.chunked:
            self.exact = False  # its framing was not counted: the next head is not known
        self.in_request, self.chunked, self.body_left = False, False, 0
        if not self.lost:
            self._arm(self.guard.header_timeout_s, restart=True)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- probes ------------------------------------------------------------------------------

    def _answer_probe(self, data: bytes) -> bool:
        """Answer a health probe now, when `data` is exactly one probe's head; False (nothing
        done) otherwise. h11 never sees these bytes, so its state stays idle for the
        connection's next request."""
        probe = health_request(data)
        if probe is None or self.transport is None:
            return False
        path, close = probe
        assert self.guard.ready is not None
        self.guard.health_answered += 1
        answer = health_answer(path, self.guard.ready(), close, self.default_headers())
        self.transport.write(answer)
        if close:
            self.transport.close()
        else:  # a new head deadline: the next request starts now
            self._arm(min(self.guard.header_timeout_s, self.keep_alive_s), restart=True)
        return True

    # -- deadlines ---------------------------------------------------------------------------

    def _arm(self, delay: float, restart: bool = False) -> None:
        """Start a read deadline, unless one runs and `restart` is False: trickling bytes does
        not extend a deadline."""
        if self._timer is not None and not restart:
            return
        self._disarm()
        if self.transport is not None and not self.transport.is_closing():
            self._timer = self.loop.call_later(delay, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self.transport is None or self.transport.is_closing():
            return
        self.guard.timed_out += 1
        if self.idle:  # a head still arriving (or an idle keep-alive): say why, then close
            self.transport.write(_TOO_SLOW)
        self.transport.close()


@contextlib.contextmanager
def on_connection(scope: Scope) -> Iterator[GuardedConnection | None]:
    """The request's GuardedConnection (None under another server) for the time the app has the
    request: it counts as busy, and idle again once the app has answered; the request gets its
    `gone` probe (`scope["reweighter.gone"]`). Admission (admission.py) runs every request in
    it, so the connection layer needs no ASGI layer of its own."""
    state = scope.get("state")
    conn = state.get(CONNECTION) if state else None
    if conn is None:
        yield None
        return
    conn.request_started()
    scope["reweighter.gone"] = conn.gone
    try:
        yield conn
    finally:
        conn.request_done()


def _declared_body(head: bytes) -> int | None:
    """The body a request head declares: its content-length (0 without one), None when chunked
    (or anything the connection will not count: h11 judges it)."""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            value = value.strip()
            if not value.isdigit():
                return None
            length = int(value)
    return length


def _default_headers(config: Any) -> Callable[[], list[tuple[bytes, bytes]]]:
    """The headers uvicorn adds to every answer, from its public settings (`server_header`,
    `date_header`, `headers`): a probe answered here looks like one answered by the app."""
    from email.utils import formatdate

    fixed: list[tuple[bytes, bytes]] = []
    if getattr(config, "server_header", True):
        fixed.append((b"server", b"uvicorn"))
    for name, value in getattr(config, "headers", None) or []:
        fixed.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    with_date = bool(getattr(config, "date_header", True))

    def headers() -> list[tuple[bytes, bytes]]:
        if not with_date:
            return fixed
        return [(b"date", formatdate(usegmt=True).encode()), *fixed]

    return headers


UVICORN_TESTED = ">=0.54,<0.55"
"""The uvicorn versions the connection layer is tested on: pyproject pins the server extra to
it. What it relies on is public (the module docstring); the pin keeps it tested."""
