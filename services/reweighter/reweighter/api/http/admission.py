"""The one admission step of the HTTP transport: who calls (key and tenant), until when
(deadline), how much (body size) and when (pace), judged once per request, before anything
reads or parses its body.

Why before the routes: a route dependency runs after FastAPI has read and parsed the whole
body, so an unauthenticated client could make the server read 100+ MB. A refusal here answers at
once with `connection: close`, so the server stops reading the rest of the body too. Nothing
after this step checks a key again: the /v1 routes take no dependencies (dispatch.py refuses a
route that declares one), so there is no second place for admission to drift into.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...assembly.pace import Pace
from ...errors import InvalidInput, LimitExceeded, ReweighterError, Unauthenticated
from ...tenancy import DEADLINE_HEADER, DEFAULT, Deadline, Tenant, Tenants, enter, set_deadline
from ..metrics import Metrics
from .connections import GuardedConnection, on_connection
from .errors import error_response
from .routes import endpoint_name

PROTECTED_PREFIX = "/v1/"
"""Paths that need a caller: a key, or a secret of their own (`own_secret`)."""

PACED = ("/v1/groups/", "/v1/openrlhf/")
"""The routes whose requests join a group and wait for it (`POST /v1/groups/{group_id}/members`,
the OpenRLHF route): paced."""


class Admission:
    """ASGI middleware: 401 without a key (on /v1/ routes), 422 for a bad deadline header, 413
    for a body over the limit, a turn of the members' pace; then the request goes on with its
    tenant and deadline set (`reweighter.tenancy`).

    A declared Content-Length is checked up front (the server enforces that framing); a chunked
    body is read, counted and replayed.
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        metrics: Metrics,
        tenants: Tenants,
        own_secret: Callable[[str], bool | Tenant] | None = None,
        pace: Pace | None = None,
        methods: Callable[[str, str], bool | None] | None = None,
    ) -> None:
        """`own_secret(path)`: True (or its Tenant) for a path that carries its own secret and
        has passed its check (raises Unauthenticated when it fails); such a path needs no bearer
        key. `pace`: the assembler's (assembly/pace.py); a group member's request (PACED) takes
        its admission turn here, before its routing and parsing, so a burst of them cannot hold
        the loop in one iteration. `tenants`: who may call (reweighter.tenancy).
        `methods(path, method)`: whether a known path takes the method (routes.RouteMethods);
        one it does not take goes on unjudged, to the router's 405."""
        self.app, self.limit, self.metrics, self.tenants = app, limit, metrics, tenants
        self.own_secret = own_secret
        self.pace = pace
        self.methods = methods

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with on_connection(scope) as conn:  # busy until answered (connections.py)
            await self._admit(scope, receive, send, conn)

    async def _admit(
        self, scope: Scope, receive: Receive, send: Send, conn: GuardedConnection | None
    ) -> None:
        path = scope.get("path", "")
        if self.methods is not None and self.methods(path, scope.get("method", "")) is False:
            await self.app(scope, receive, send)  # the router's 405, naming the methods
            return
        headers = dict(scope.get("headers", []))
        try:
            tenant = self._caller(path, headers.get(b"authorization"))
            deadline = _deadline(headers.get(DEADLINE_HEADER.encode()), scope)
        except (Unauthenticated, InvalidInput) as exc:
            await self._refuse(scope, send, exc)
            return
        if tenant is not None:
            scope["reweighter.tenant"] = tenant
            enter(tenant)  # this request's task only (uvicorn runs each in its own)
        set_deadline(deadline)
        if self.pace is not None and path.startswith(PACED):
            await self.pace.turn()
        declared = headers.get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                await self._refuse(scope, send, self._too_big(int(declared)))
                return
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(scope, send, self._too_big(size))
                return
            more = message.get("more_body", False)
        if conn is not None:
            conn.body_read()
        await self.app(scope, replay(b"".join(chunks), receive), send)

    def _caller(self, path: str, auth: bytes | None) -> Tenant | None:
        """The caller's tenant: a path's own secret, else the bearer key on /v1/ paths; None
        for the open paths (health, metrics, docs), which carry no request content."""
        owned = self.own_secret(path) if self.own_secret is not None else False
        if owned:
            return owned if isinstance(owned, Tenant) else DEFAULT
        if path.startswith(PROTECTED_PREFIX):
            header = auth.decode("latin-1") if auth else None
            return self.tenants.table.resolve_bearer(header)
        return None

    def _too_big(self, size: int) -> LimitExceeded:
        return LimitExceeded(f"request body of {size}+ bytes exceeds the limit of {self.limit}")

    async def _refuse(self, scope: Scope, send: Send, exc: ReweighterError) -> None:
        """Answer now and close: the unread rest of the body is never read."""
        path = scope.get("path", "")
        self.metrics.count_rejected("http", endpoint_name(path), type(exc).__name__)
        response = error_response(path, exc, {"connection": "close"})
        await response(scope, _no_receive, send)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` (already read) once, then defers to the real one (a
    disconnect): for the app after admission has read a chunked body."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def _deadline(header: bytes | None, scope: Scope) -> Deadline:
    """The request's deadline: `x-request-timeout` seconds from now, and the probe of whether its
    client has gone (the connection layer's, api/http/connections.py; other servers: none)."""
    at = None
    if header is not None:
        try:
            seconds = float(header)
        except ValueError:
            seconds = float("nan")
        if not seconds > 0 or seconds == float("inf"):
            raise InvalidInput(
                f"must be a positive number of seconds, got {header.decode('latin-1')!r}",
                field=DEADLINE_HEADER,
            )
        at = time.monotonic() + seconds
    return Deadline(at, scope.get("reweighter.gone"))


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
