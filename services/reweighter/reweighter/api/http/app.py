"""The HTTP app factory: FastAPI over the engine, with the error mapping both routers share.

Errors are one JSON shape everywhere (`ErrorOut`): the engine's ReweighterError keeps its
status code, and a schema error (wrong type, unknown key, bad JSON) is a 422 naming the field
in the engine's dotted-path form, so clients see one convention whichever layer refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ... import __version__
from ...assembly import GroupAssembler
from ...config import Settings
from ...engine.surface import EngineSurface
from ...errors import InvalidInput, ReweighterError
from ...limits import max_body_bytes
from ...tenancy import Tenants
from ...wire.openai import OPENAI_PATHS
from ..metrics import Metrics
from .calls import CallFastPath
from .middleware import BodyLimit, endpoint_name, error_response
from .openrlhf import build_openrlhf_router, token_tenant
from .router import build_router
from .routes import RequestFields, route_labels


def create_app(
    engine: EngineSurface,
    settings: Settings | None = None,
    *,
    metrics: Metrics | None = None,
    assembler: GroupAssembler | None = None,
    tenants: Tenants | None = None,
    direct_calls: bool = True,
) -> FastAPI:
    """The HTTP API over `engine`. Loading the model is the caller's job. Without `assembler`
    the group-assembly route answers 503. `tenants`: who may call (shared with the gRPC server
    so a reload applies to both); default from `settings` (the tenants file, else the API key).
    `direct_calls`: serve well-formed call requests before FastAPI routes them (api/http/calls.py;
    False only to compare the two paths in tests)."""
    settings = settings or engine.settings
    tenants = tenants if tenants is not None else Tenants.from_settings(settings)
    metrics = metrics or Metrics(engine)
    metrics.watch_tenants(tenants)
    app = FastAPI(
        title="Reweighter",
        version=__version__,
        description="Diversity-aware reward reweighting (DRA-GRPO, MMR-GRPO) for GRPO training.",
    )
    app.state.engine = engine
    app.state.metrics = metrics
    app.state.assembler = assembler
    app.state.tenants = tenants
    # Derived from the routes, whenever they are added: field names for schema errors, labels
    # for metrics (a new route needs neither listed).
    request_fields = RequestFields(app)
    metrics.watch_routes(lambda: route_labels(app))

    def engine_error(path: str, exc: ReweighterError) -> JSONResponse:
        """The one answer to the engine's errors, for the FastAPI routes and the direct path
        of the calls (calls.CallFastPath)."""
        if exc.http_status == 401:
            metrics.count_rejected("http", endpoint_name(path), type(exc).__name__)
        headers = {"Retry-After": "1"} if exc.http_status in (429, 503) else None
        return error_response(path, exc, headers)

    @app.exception_handler(ReweighterError)
    async def _reweighter_error(request: Request, exc: ReweighterError) -> JSONResponse:
        return engine_error(request.url.path, exc)

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
        unknown path) in the same shape as every other error."""
        kind = _HTTP_ERROR_TYPES.get(exc.status_code, "HTTPError")
        if exc.status_code < 500:
            metrics.count_rejected("http", endpoint_name(request.url.path), kind)
        if request.url.path in OPENAI_PATHS:
            err = ReweighterError(str(exc.detail), http_status=exc.status_code)
            return error_response(request.url.path, err, exc.headers)
        body = {"error": {"message": str(exc.detail), "field": None, "type": kind}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    app.include_router(build_router(engine, settings, metrics, assembler, tenants))
    app.include_router(build_openrlhf_router(settings.openrlhf, metrics, assembler))
    token = settings.openrlhf.token
    if direct_calls:  # inside BodyLimit: the key, tenant, deadline and size are checked first
        app.add_middleware(CallFastPath, engine=engine, metrics=metrics, on_error=engine_error)
    app.add_middleware(
        BodyLimit,
        limit=max_body_bytes(settings),
        metrics=metrics,
        api_key=settings.api_key,
        own_secret=lambda path: token_tenant(path, token, tenants),
        pace=assembler.pace if assembler is not None else None,
        tenants=tenants,
    )
    return app


_HTTP_ERROR_TYPES = {
    400: "InvalidInput",
    401: "Unauthenticated",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "LimitExceeded",
}


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
