"""The HTTP routes: each converts its schema to an engine call and the result back.

The request/answer calls (reweighter.wire.calls: reweight, and any added by the route recipe
in the `reweighter` package docstring) are routed from their table entry, with no code here;
embed, info, the group members and the health routes are written out here, their messages
still derived from reweighter.types (reweighter.wire.http); the health routes are also answered
by the connection layer before the app (api/http/connections.py), with the same bytes.
Every /v1 route is an EdgeRoute (dispatch.py: one dispatcher) behind one admission step
(admission.py: key, tenant, deadline, size, pace); none takes a dependency.
The field names of its schema errors and its metrics label come from the route itself
(routes.py): there is no list to extend.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from ...assembly import GroupAssembler
from ...config import Settings
from ...engine.surface import EngineSurface
from ...errors import NotReady
from ...tenancy import current_tenant
from ...types import EngineInfo, MemberSubmission
from ...wire.calls import CALLS, Call
from ...wire.common import rules_of
from ...wire.http import (
    EmbedIn,
    EmbedOut,
    ErrorOut,
    MemberIn,
    MemberOut,
    StatusOut,
    answer,
    model,
    to_engine,
)
from ..metrics import Metrics
from .connections import probe_answer
from .dashboard import build_dashboard_data, build_dashboard_page
from .dispatch import v1_router
from .openai import build_openai_router

CONNECTION_RESPONSES: dict[int | str, dict[str, Any]] = {
    408: {"model": ErrorOut, "description": "Timeout: the request's head or body was not sent "
          "in time (the connection layer, connections.py, before the app)"},
    429: {"model": ErrorOut, "description": "Overloaded: no room for another connection (the "
          "connection layer), or too much queued; retry with backoff (`Retry-After`)"},
}  # fmt: skip
"""What the connection layer may answer any request, whatever its path: every operation
documents them."""

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **CONNECTION_RESPONSES,
    **{
        code: {"model": ErrorOut, "description": desc}
        for code, desc in {
            400: "the body could not be read: not JSON, or not UTF-8",
            401: "missing or wrong API key",
            405: "the path does not take this method (`Allow` names those it takes)",
            413: "over the configured limits (the body's size, or a count or length within "
            "it: `field` names it)",
            422: "invalid input; `field` names it",
            503: "the model is still loading; retry",
            504: "the request's x-request-timeout passed, or its client went away, before it "
            "was computed",
        }.items()
    },
}
"""What any /v1 operation may answer besides its success: every status the connection layer,
the edge and the engine can give it (a route adds its own: 404, 409, 502)."""


_MEMBER_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {
        "model": ErrorOut,
        "description": "NotFound: a group id with a newline, which the URL path cannot carry "
        "(no route matches it)",
    },
    409: {
        "model": ErrorOut,
        "description": "Conflict: this member was sent before with another payload; or "
        "PreconditionFailed: it does not fit its group (`field` names what differs)",
    },
    503: {"model": ErrorOut, "description": "the model is loading or Redis is down; retry"},
}


GroupId = Annotated[
    str,
    Path(
        description="the group (no newline: the path cannot carry one)",
        json_schema_extra={**rules_of(MemberSubmission, "group_id"), "pattern": "^[^\n]*$"},
    ),
]
"""The member route's path parameter, its rules stated as its message's field states them
(documented only: the engine judges them, as for every transport), and the one this path adds:
no newline (the route's `{group_id:path}` does not match one: 404)."""


def build_router(
    engine: EngineSurface,
    settings: Settings,
    metrics: Metrics,
    assembler: GroupAssembler | None = None,
) -> APIRouter:
    """The app's routes: health, the dashboard page, and /v1 (its caller admitted before:
    admission.py)."""
    health = APIRouter(tags=["health"], responses=CONNECTION_RESPONSES)
    api = v1_router(prefix="/v1", responses=ERROR_RESPONSES)

    def probe(path: str, response: Response) -> StatusOut:
        code, state, headers = probe_answer(path, engine.ready)
        response.status_code = code
        response.headers.update(headers)
        return StatusOut(status=state)

    @health.get("/healthz", response_model=StatusOut)
    async def healthz(response: Response) -> StatusOut:
        """The process is alive (it may still be loading the model)."""
        return probe("/healthz", response)

    @health.get("/readyz", response_model=StatusOut, responses={503: {"model": StatusOut}})
    async def readyz(response: Response) -> StatusOut:
        """200 once the model is loaded; 503 before (route traffic only when ready)."""
        return probe("/readyz", response)

    @health.get("/metrics", response_class=Response)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @api.get("/info", response_model=EngineInfo)
    async def info() -> EngineInfo:
        """Model, dimension, device, methods and their parameter schemas, limits, version, and
        the caller's tenant."""
        with metrics.track("http", "info"):
            return {**engine.info(), "tenant": current_tenant()}

    for call in CALLS.values():
        api.add_api_route(
            f"/{call.name}",  # under the /v1 prefix: call.path
            _handler(call, engine, metrics),
            methods=["POST"],
            name=call.name,
            description=call.doc,
            response_model=model(call.result, inbound=False),
        )

    @api.post("/embed", response_model=EmbedOut)
    async def embed(body: EmbedIn) -> EmbedOut:
        """Embed texts (TEI's conventions): unit vectors, one per input."""
        with metrics.track("http", "embed"):
            return answer(await engine.aembed(to_engine(body).texts()))  # type: ignore[return-value]

    # group ids may hold "/" (sent percent-encoded; the path is decoded before routing)
    @api.post("/groups/{group_id:path}/members", response_model=MemberOut, responses=_MEMBER_ERRORS)
    async def submit_member(group_id: GroupId, body: MemberIn) -> MemberOut:
        """Add one member to its group and wait until the group is whole (or the member's
        timeout passes); the answer equals /v1/reweight on the group in member_id order."""
        with metrics.track("http", "members", body.method):
            if assembler is None:
                raise NotReady("group assembly is not running in this service")
            sub = to_engine(body, group_id=group_id)
            return answer(await assembler.submit(sub))  # type: ignore[return-value]

    api.include_router(build_dashboard_data(engine, metrics))

    router = APIRouter()
    router.include_router(health)
    router.include_router(build_dashboard_page())
    router.include_router(api)
    # under /v1 but not under `api`: its errors are OpenAI's shape and codes (its own responses)
    router.include_router(build_openai_router(engine, settings, metrics), prefix="/v1")
    return router


async def serve_call(call: Call, engine: EngineSurface, metrics: Metrics, body: Any) -> BaseModel:
    """One call, its body parsed: counted and timed, the engine coroutine, the answer model."""
    with metrics.track("http", call.name, str(getattr(body, "method", ""))):
        request = to_engine(body)
        if call.size is not None:
            metrics.completions.labels("http").observe(call.size(request))
        return answer(await getattr(engine, call.engine)(request))


def _handler(call: Call, engine: EngineSurface, metrics: Metrics) -> Callable[..., Any]:
    """The endpoint of one call of the table: its body parsed with the request's model (by the
    dispatcher), then `serve_call` (the metrics label is the call's name and the method, if the
    request has one). Its signature names the request model, so FastAPI documents the call."""

    async def handle(body: Any) -> Any:
        return await serve_call(call, engine, metrics, body)

    body = inspect.Parameter(
        "body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=model(call.request, True)
    )
    handle.__signature__ = inspect.Signature([body])  # type: ignore[attr-defined]
    return handle
