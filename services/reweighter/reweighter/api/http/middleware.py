"""ASGI middleware of the HTTP transport: the body-size limit, enforced before any parsing."""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...errors import LimitExceeded
from ..metrics import Metrics
from .schemas import ErrorOut


def endpoint_name(path: str) -> str:
    """The metrics label of a path: its last segment ("/v1/reweight" -> "reweight")."""
    return path.rsplit("/", 1)[-1] or "root"


class BodyLimit:
    """413 for bodies over the limit, before anything parses them.

    A declared Content-Length is checked up front (the server enforces that framing); a chunked
    body is read, counted and replayed.
    """

    def __init__(self, app: ASGIApp, limit: int, metrics: Metrics) -> None:
        self.app, self.limit, self.metrics = app, limit, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                await self._refuse(scope, send, int(declared))
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
                await self._refuse(scope, send, size)
                return
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send, size: int) -> None:
        exc = LimitExceeded(f"request body of {size}+ bytes exceeds the limit of {self.limit}")
        self.metrics.count_rejected("http", endpoint_name(scope.get("path", "")), "LimitExceeded")
        body = ErrorOut.from_error(exc).model_dump()
        response = JSONResponse(body, status_code=413)
        await response(scope, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
