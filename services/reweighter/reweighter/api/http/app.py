"""The HTTP app factory: FastAPI over the engine, one path per request.

A request meets, in order: the connection layer (connections.py, before the app: deadlines,
the bound, the probes), one admission step (admission.py: key and tenant, deadline, size,
pace), FastAPI's routing, and one dispatcher for every /v1 route (dispatch.py); every refusal
on the way is written by one error writer (errors.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from ... import __version__
from ...assembly import GroupAssembler
from ...config import Settings
from ...engine.surface import EngineSurface
from ...limits import max_body_bytes
from ...tenancy import Tenants
from ...wire.openai import OPENAI_PATHS
from ..metrics import Metrics
from .admission import PROTECTED_PREFIX, Admission
from .dispatch import check_routes
from .errors import install_error_handlers
from .openrlhf import build_openrlhf_router, token_tenant
from .router import build_router
from .routes import RequestFields, RouteMethods, route_labels


def create_app(
    engine: EngineSurface,
    settings: Settings | None = None,
    *,
    metrics: Metrics | None = None,
    assembler: GroupAssembler | None = None,
    tenants: Tenants | None = None,
) -> FastAPI:
    """The HTTP API over `engine`. Loading the model is the caller's job. Without `assembler`
    the group-assembly route answers 503. `tenants`: who may call (shared with the gRPC server
    so a reload applies to both); default from `settings` (the tenants file, else the API key)."""
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
    install_error_handlers(app, metrics, RequestFields(app))
    metrics.watch_routes(lambda: route_labels(app))
    app.include_router(build_router(engine, settings, metrics, assembler))
    app.include_router(build_openrlhf_router(settings.openrlhf, metrics, assembler))
    check_routes(app)
    _document(app, keyed=not tenants.table.open)
    token = settings.openrlhf.token
    app.add_middleware(
        Admission,
        limit=max_body_bytes(settings),
        metrics=metrics,
        tenants=tenants,
        own_secret=lambda path: token_tenant(path, token, tenants),
        pace=assembler.pace if assembler is not None else None,
        methods=RouteMethods(app),
    )
    return app


BEARER = {"type": "http", "scheme": "bearer", "description": "the API key (or a tenant's): "
          "`Authorization: Bearer <key>`; needed on /v1 when the service has one"}  # fmt: skip
"""The document's security scheme: what admission (admission.py) asks of a /v1 caller."""


def _document(app: FastAPI, keyed: bool) -> None:
    """/openapi.json as FastAPI writes it, and two things FastAPI cannot know: a keyed service
    asks every /v1 operation for the bearer key (`securitySchemes`; the OpenRLHF token path
    carries its own secret and may go without), and the OpenAI paths lose the 422 FastAPI adds
    to every operation with a body: they answer bad input with 400 in OpenAI's shape (their
    responses say so), and a generated client would wait for a 422 that never comes."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = build()
            for path, operations in doc["paths"].items():
                for operation in operations.values():
                    if path in OPENAI_PATHS:
                        operation["responses"].pop("422", None)
                    if keyed and path.startswith(PROTECTED_PREFIX):
                        own = "{token}" in path  # its secret in the path, or the key
                        operation["security"] = [{"bearer": []}, {}] if own else [{"bearer": []}]
            if keyed:
                doc.setdefault("components", {})["securitySchemes"] = {"bearer": BEARER}
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
