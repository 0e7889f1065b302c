"""The one error writer of the HTTP transport.

Every refusal, whoever makes it (admission before the body is read, the engine's checks, a
schema error, the framework's 404 or 405, the connection layer's 408 and 429), is written from
`error_body`: OpenAI's shape (400 for bad input) on the OpenAI paths, ours (`ErrorOut`, the
error's own code) everywhere else, with `Retry-After` on the retryable codes. A schema error
names the field in the engine's dotted-path form, so clients see one convention whichever
layer refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ...errors import InvalidInput, ReweighterError
from ...wire.http import ErrorOut
from ...wire.openai import OPENAI_PATHS, openai_error, openai_status
from ..metrics import Metrics
from .routes import endpoint_name

RETRYABLE = (429, 503)
"""Codes answered with `Retry-After: 1`: the client should come back, not give up."""

_HTTP_ERROR_TYPES = {
    400: "InvalidInput",
    401: "Unauthenticated",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "LimitExceeded",
}
"""The `type` of the framework's own refusals, in the engine's error names where one fits."""


def error_body(path: str, exc: ReweighterError, kind: str | None = None) -> tuple[int, Any]:
    """(status, JSON body) of `exc` as `path`'s clients expect it; `kind` overrides the error
    type's name (the framework's refusals, which have no error class of ours)."""
    if path in OPENAI_PATHS:
        return openai_status(exc), openai_error(exc).model_dump()
    body = ErrorOut.from_error(exc).model_dump()
    if kind is not None:
        body["error"]["type"] = kind
    return exc.http_status, body


def error_response(
    path: str,
    exc: ReweighterError,
    headers: Mapping[str, str] | None = None,
    kind: str | None = None,
) -> JSONResponse:
    """`exc` as the response every layer of the app sends."""
    status, body = error_body(path, exc, kind)
    out = dict(headers or {})
    if status in RETRYABLE:
        out.setdefault("Retry-After", "1")
    return JSONResponse(body, status_code=status, headers=out or None)


def error_bytes(exc: ReweighterError, reason: str, kind: str | None = None) -> bytes:
    """`exc` as raw HTTP/1.1 bytes that close the connection: for the connection layer, which
    answers before there is a request for an ASGI app to answer (a head too slow, no room)."""
    status, body = error_body("", exc, kind)
    data = json.dumps(body, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + data


def install_error_handlers(
    app: FastAPI, metrics: Metrics, request_fields: Callable[[], set[str]]
) -> None:
    """The app's three exception handlers, each through `error_response`. `request_fields`:
    the field names of the routes' requests (routes.RequestFields), to name a schema error's
    field."""

    @app.exception_handler(ReweighterError)
    async def _reweighter_error(request: Request, exc: ReweighterError) -> JSONResponse:
        if exc.http_status == 401:
            metrics.count_rejected("http", endpoint_name(request.url.path), type(exc).__name__)
        return error_response(request.url.path, exc)

    @app.exception_handler(RequestValidationError)
    async def _schema_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        field = validation_field(first, request_fields())
        if first.get("type") == "json_invalid":
            message = f"invalid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}"
            field = None
        else:
            message = first.get("msg", "invalid input")
        metrics.count_rejected("http", endpoint_name(request.url.path), "InvalidInput")
        return error_response(request.url.path, InvalidInput(message, field=field))

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        """Framework refusals (a body that is not JSON or not UTF-8, nesting too deep, an
        unknown path or method) in the same shape as every other error."""
        kind = _HTTP_ERROR_TYPES.get(exc.status_code, "HTTPError")
        if exc.status_code < 500:
            metrics.count_rejected("http", endpoint_name(request.url.path), kind)
        err = ReweighterError(str(exc.detail), http_status=exc.status_code)
        return error_response(request.url.path, err, exc.headers, kind=kind)


def validation_field(error: Mapping[str, Any], known: set[str]) -> str | None:
    """A pydantic error's location as the engine's dotted path: ("body","groups",0,"rewards") ->
    "groups[0].rewards". Union-branch tags that pydantic inserts ("float", "int") are dropped;
    an unknown key (extra="forbid") is kept, since it is the field at fault."""
    loc = list(error.get("loc", ()))
    out = ""
    for i, part in enumerate(loc):
        last_extra = error.get("type") == "extra_forbidden" and i == len(loc) - 1
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in known or (last_extra and part != "body"):
            out += f".{part}" if out else str(part)
    return out or None
