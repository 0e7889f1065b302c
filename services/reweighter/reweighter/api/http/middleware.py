"""ASGI middleware of the HTTP transport: the API key and the body-size limit, both enforced
before a byte of the body is read.

Checking the key in a route dependency is too late: FastAPI reads and parses the whole body
first, so an unauthenticated client could make the server read 100+ MB. A refusal here answers
at once with `connection: close`, so the server stops reading the rest of the body too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...assembly.pace import Pace
from ...errors import InvalidInput, LimitExceeded, ReweighterError, Unauthenticated
from ...tenancy import (
    DEADLINE_HEADER,
    DEFAULT,
    Deadline,
    Tenant,
    Tenants,
    enter,
    set_deadline,
    single_key,
)
from ...wire.http import ErrorOut
from ...wire.openai import OPENAI_PATHS, openai_error, openai_status
from ..metrics import Metrics


def endpoint_name(path: str) -> str:
    """The metrics label of a path: its last segment ("/v1/reweight" -> "reweight"); the
    OpenRLHF route (which may carry a secret segment) is "openrlhf"."""
    if path.startswith("/v1/openrlhf/"):
        return "openrlhf"
    return path.rsplit("/", 1)[-1] or "root"


def error_response(
    path: str, exc: ReweighterError, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An error as the path's clients expect it: OpenAI's shape (400 for bad input) on the
    OpenAI routes, ours (`ErrorOut`, the error's own code) everywhere else."""
    if path in OPENAI_PATHS:
        body = openai_error(exc).model_dump()
        return JSONResponse(body, status_code=openai_status(exc), headers=headers)
    body = ErrorOut.from_error(exc).model_dump()
    return JSONResponse(body, status_code=exc.http_status, headers=headers)


PROTECTED_PREFIX = "/v1/"


MEMBER_PREFIX = "/v1/groups/"
"""The group-member route (`POST /v1/groups/{group_id}/members`): paced."""


class BodyLimit:
    """401 without the API key (on /v1/ routes), then 413 for bodies over the limit, before
    anything reads or parses them.

    A declared Content-Length is checked up front (the server enforces that framing); a chunked
    body is read, counted and replayed.
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        metrics: Metrics,
        api_key: str | None = None,
        own_secret: Callable[[str], bool | Tenant] | None = None,
        pace: Pace | None = None,
        tenants: Tenants | None = None,
    ) -> None:
        """`own_secret(path)`: True (or its Tenant) for a path that carries its own secret and
        has passed its check (raises Unauthenticated when it fails); such a path needs no bearer
        key. `pace`: the assembler's (assembly/pace.py); a group member's request takes a turn
        before its routing and parsing, so a burst of them cannot hold the loop in one
        iteration. `tenants`: who may call (reweighter.tenancy); default: `api_key` alone.
        The caller's tenant is set for the route (`reweighter.tenancy.current_tenant`)."""
        self.app, self.limit, self.metrics, self.api_key = app, limit, metrics, api_key
        self.own_secret = own_secret
        self.pace = pace
        self.tenants = tenants if tenants is not None else Tenants(single_key(api_key))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        path = scope.get("path", "")
        tenant: Tenant | None = None
        try:
            owned = self.own_secret(path) if self.own_secret is not None else False
            if owned:
                tenant = owned if isinstance(owned, Tenant) else DEFAULT
            elif path.startswith(PROTECTED_PREFIX):
                auth = headers.get(b"authorization")
                table = self.tenants.table
                tenant = table.resolve_bearer(auth.decode("latin-1") if auth else None)
            deadline = _deadline(headers.get(DEADLINE_HEADER.encode()), receive)
        except (Unauthenticated, InvalidInput) as exc:
            await self._refuse(scope, send, exc)
            return
        if tenant is not None:
            scope["reweighter.tenant"] = tenant
            enter(tenant)  # this request's task only (uvicorn runs each in its own)
        set_deadline(deadline)
        if self.pace is not None and path.startswith(MEMBER_PREFIX):
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
        await self.app(scope, replay(b"".join(chunks), receive), send)

    def _too_big(self, size: int) -> LimitExceeded:
        return LimitExceeded(f"request body of {size}+ bytes exceeds the limit of {self.limit}")

    async def _refuse(self, scope: Scope, send: Send, exc: ReweighterError) -> None:
        """Answer now and close: the unread rest of the body is never read."""
        path = endpoint_name(scope.get("path", ""))
        self.metrics.count_rejected("http", path, type(exc).__name__)
        response = error_response(scope.get("path", ""), exc, {"connection": "close"})
        await response(scope, _no_receive, send)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives `body` (already read) once, then defers to the real one (a
    disconnect): for the app after a middleware has read the request's body."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def _deadline(header: bytes | None, receive: Receive) -> Deadline | None:
    """The request's deadline: `x-request-timeout` seconds from now, and a probe of whether its
    client has gone (uvicorn's request cycle records a disconnect; other servers: no probe)."""
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
    cycle = getattr(receive, "__self__", None)
    gone = (lambda: bool(cycle.disconnected)) if hasattr(cycle, "disconnected") else None
    return Deadline(at, gone)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
