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
- bound: at `max_connections` open connections, a new one closes the oldest connection that has
  no request in progress (idle keep-alive, or a head still arriving): a flood of idle sockets
  cannot lock out /healthz or real clients. When every connection is busy, the new one gets a
  429 and is closed. Busy connections (a request being served, e.g. waiting on group assembly)
  are never evicted, so the bound is also how many requests may wait at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

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


class ConnectionGuard:
    """Open connections of one HTTP server, oldest first, and the limits they live under."""

    def __init__(
        self, max_connections: int, header_timeout_s: float, body_timeout_s: float
    ) -> None:
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.open: dict[GuardedProtocol, None] = {}  # insertion order = age
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0

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
        super().data_received(data)
        self._arm()

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


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedProtocol]:
    """An H11Protocol class bound to `guard`, for uvicorn.Config(http=...)."""
    return type("GuardedH11Protocol", (GuardedProtocol,), {"guard": guard})
