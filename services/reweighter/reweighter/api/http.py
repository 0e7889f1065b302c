"""The HTTP transport: FastAPI routes that translate JSON to engine calls and back."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..config import Settings
from ..errors import LimitExceeded, ReweighterError
from . import convert
from .auth import check_bearer
from .metrics import Metrics
from .schemas import EmbedIn, EmbedOut, ErrorOut, GroupIn, ReweightIn, ReweightOut

_SCHEMA_FIELDS = (
    set(ReweightIn.model_fields) | set(GroupIn.model_fields) | set(EmbedIn.model_fields)
)
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": desc}
    for code, desc in {
        401: "missing or wrong API key",
        413: "over the configured limits",
        422: "invalid input; `field` names it",
        429: "overloaded; retry with backoff",
        503: "the model is still loading; retry",
    }.items()
}


def max_body_bytes(settings: Settings) -> int:
    """Bodies above this are refused before parsing: texts at 4 bytes per character plus room
    for precomputed embeddings written as JSON (about 24 bytes per number at 1024 dims)."""
    return 4 * settings.max_chars + 24 * 1024 * settings.max_completions + (1 << 20)


def _endpoint(path: str) -> str:
    return path.rsplit("/", 1)[-1] or "root"


def create_app(engine: Any, settings: Settings | None = None, *, metrics: Metrics | None = None):
    """The HTTP API over `engine` (a ReweightEngine). Loading the model is the caller's job."""
    settings = settings or engine.settings
    metrics = metrics or Metrics(engine)
    app = FastAPI(
        title="Reweighter",
        version=__version__,
        description="Diversity-aware reward reweighting (DRA-GRPO, MMR-GRPO) for GRPO training.",
    )
    app.state.engine = engine
    app.state.metrics = metrics

    def require_key(request: Request) -> None:
        check_bearer(request.headers.get("authorization"), settings.api_key)

    @app.exception_handler(ReweighterError)
    async def _reweighter_error(request: Request, exc: ReweighterError) -> JSONResponse:
        if exc.http_status in (401,):
            metrics.count_rejected("http", _endpoint(request.url.path), type(exc).__name__)
        headers = {"Retry-After": "1"} if exc.http_status in (429, 503) else None
        return JSONResponse(
            convert.error_to_http(exc), status_code=exc.http_status, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _schema_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        field = convert.validation_field(first, _SCHEMA_FIELDS)
        if first.get("type") == "json_invalid":
            message = f"invalid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}"
            field = None
        else:
            message = first.get("msg", "invalid input")
        metrics.count_rejected("http", _endpoint(request.url.path), "InvalidInput")
        body = {"error": {"message": message, "field": field, "type": "InvalidInput"}}
        return JSONResponse(body, status_code=422)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process is alive (it may still be loading the model)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"description": "still loading"}})
    async def readyz() -> JSONResponse:
        """200 once the model is loaded; 503 before (route traffic only when ready)."""
        if engine.ready:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "1"})

    @app.get("/metrics", tags=["health"], response_class=Response)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/info", dependencies=[Depends(require_key)], responses=_ERRORS)
    async def info() -> dict[str, Any]:
        """Model, dimension, device, methods and their parameter schemas, limits, version."""
        with metrics.track("http", "info"):
            return engine.info()

    @app.post(
        "/v1/reweight",
        response_model=ReweightOut,
        dependencies=[Depends(require_key)],
        responses=_ERRORS,
    )
    async def reweight(body: ReweightIn) -> JSONResponse:
        """Reweight each group's rewards by its completions' redundancy (and compute advantages)."""
        with metrics.track("http", "reweight", body.method):
            request = convert.http_to_request(body)
            metrics.completions.labels("http").observe(sum(len(g.rewards) for g in body.groups))
            result = await engine.areweight(request)
        return JSONResponse(convert.result_to_http(result))

    @app.post(
        "/v1/embed", response_model=EmbedOut, dependencies=[Depends(require_key)], responses=_ERRORS
    )
    async def embed(body: EmbedIn) -> JSONResponse:
        """Embed texts (TEI's conventions): unit vectors, one per input."""
        with metrics.track("http", "embed"):
            result = await engine.aembed(convert.http_embed_inputs(body))
        return JSONResponse(convert.embed_to_http(result))

    app.add_middleware(_BodyLimit, limit=max_body_bytes(settings), metrics=metrics)
    return app


class _BodyLimit:
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
        self.metrics.count_rejected("http", _endpoint(scope.get("path", "")), "LimitExceeded")
        response = JSONResponse(convert.error_to_http(exc), status_code=413)
        await response(scope, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
