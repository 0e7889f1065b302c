"""The dispatcher of every /v1 route: how a request reaches its endpoint inside the FastAPI app.

Why not FastAPI's own handler for everything: the event loop is the one thread every request
crosses, and on the way to the engine FastAPI spent about 44 % of the loop's CPU per request on
its own layers (dependency resolution, re-validating the answer): the host path, not the
encoder, is what keeps a GPU waiting (BENCHMARKS "The host path"). `EdgeRoute` is FastAPI's
`APIRoute` with a leaner handler: a JSON body its request model accepts is parsed by pydantic's
JSON parser, the endpoint is called with it (and its path parameters, and the Request if it
asks), and a model answer is written by pydantic. FastAPI still routes the request, documents
the route in /openapi.json, runs the app's middleware (admission.py) and exception handlers
(errors.py); a body the model refuses, or one sent with another content type, is handed to
FastAPI's own handler of the same route, which answers it exactly as FastAPI does.

What FastAPI would do and this does not: resolve dependencies. So an EdgeRoute refuses to be
built with one, and `check_routes` refuses an app whose router adds one when it includes an
EdgeRoute: admission is the edge's, in one place (admission.py), never a `Depends` that would
be skipped for well-formed calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from ...tenancy import DEADLINE_HEADER
from .admission import replay

Handler = Callable[[Request], Coroutine[Any, Any, Response]]

DEADLINE_PARAMETER: dict[str, Any] = {
    "name": DEADLINE_HEADER,
    "in": "header",
    "required": False,
    "schema": {"type": "number", "exclusiveMinimum": 0},
    "description": "seconds the caller will wait; past them the request is dropped unserved "
    "(504). Read by admission (api/http/admission.py) for every /v1 operation",
}
"""Admission reads this header on every /v1 call; every /v1 operation documents it."""


class EdgeRoute(APIRoute):
    """An APIRoute served by the lean handler (see the module docstring). Takes a body model,
    path parameters and the Request; nothing that needs FastAPI's dependency resolution."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        extra = dict(kwargs.pop("openapi_extra", None) or {})
        extra["parameters"] = [*extra.get("parameters", []), DEADLINE_PARAMETER]
        super().__init__(path, endpoint, openapi_extra=extra, **kwargs)
        d = self.dependant
        unsupported = {
            "dependencies": d.dependencies,
            "query parameters": d.query_params,
            "header parameters": d.header_params,
            "cookie parameters": d.cookie_params,
            "more than one body": d.body_params[1:],
        }
        for what, found in unsupported.items():
            if found:
                raise TypeError(
                    f"{path}: the /v1 dispatcher (api/http/dispatch.py) takes no {what}; "
                    "admission (key, tenant, deadline, size, pace) is api/http/admission.py's"
                )
        if d.response_param_name or d.background_tasks_param_name:
            raise TypeError(f"{path}: the /v1 dispatcher takes no Response or BackgroundTasks")

    def get_route_handler(self) -> Handler:
        fastapi_handler = super().get_route_handler()
        d = self.dependant
        call = d.call
        assert call is not None
        body = d.body_params[0] if d.body_params else None
        model = body.field_info.annotation if body is not None else None
        if body is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            return fastapi_handler  # not a model body: FastAPI's handler, as declared
        path_names = [p.name for p in d.path_params]
        request_name = d.request_param_name
        render = _renderer(self.response_model)

        async def handle(request: Request) -> Response:
            kwargs: dict[str, Any] = {}
            if body is not None:
                assert model is not None
                raw = await read_body(request.receive)  # not cached on the Request
                parsed = None
                if raw and json_content(request.headers.get("content-type")):
                    try:
                        parsed = model.model_validate_json(raw)
                    except ValidationError:
                        parsed = None
                if parsed is None:  # refused or not JSON: FastAPI answers it, in its words
                    again = Request(request.scope, replay(raw, request.receive))
                    return await fastapi_handler(again)
                kwargs[body.name] = parsed
                # The model holds what the endpoint needs; the bytes are not kept while it
                # waits (a member waits for its group: its text would be held twice).
                del raw
            for name in path_names:
                kwargs[name] = request.path_params[name]
            if request_name is not None:
                kwargs[request_name] = request
            return render(await call(**kwargs))

        return handle


async def read_body(receive: Receive) -> bytes:
    """The request's whole body off `receive` (Starlette's `Request.body()` would also keep it
    on the Request for as long as the request lives)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _renderer(response_model: Any) -> Callable[[Any], Response]:
    """How an endpoint's return value is written: a Response as it is; an instance of the
    response model by pydantic, without validating it again; anything else validated against
    the response model (as FastAPI does) and written by pydantic."""
    exact = response_model if isinstance(response_model, type) else None
    adapter = TypeAdapter(response_model) if response_model is not None else None

    def render(result: Any) -> Response:
        if isinstance(result, Response):
            return result
        if exact is not None and type(result) is exact:
            data = result.model_dump_json(by_alias=True)
        elif adapter is not None:
            data = adapter.dump_json(adapter.validate_python(result), by_alias=True)
        else:
            data = json.dumps(jsonable_encoder(result), separators=(",", ":"))
        return Response(data, media_type="application/json")

    return render


def json_content(content_type: str | None) -> bool:
    """Whether a request's content type says JSON: application/json or application/<x>+json,
    which FastAPI reads as JSON. A request without one is FastAPI's to judge (it refuses it)."""
    if not content_type:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    main, _, sub = kind.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def v1_router(**kwargs: Any) -> APIRouter:
    """An APIRouter whose routes are EdgeRoutes: every router under /v1 is made with this."""
    return APIRouter(route_class=EdgeRoute, **kwargs)


def check_routes(app: FastAPI) -> None:
    """Refuse an app in which an EdgeRoute runs under a dependency (an including router's):
    the dispatcher would skip it. Raises TypeError naming the route."""
    for ctx in iter_route_contexts(app.routes):
        if not isinstance(ctx.original_route, EdgeRoute):
            continue
        dependant = getattr(ctx, "dependant", None)
        if dependant is not None and dependant.dependencies:
            raise TypeError(
                f"{ctx.path}: a router adds a dependency to this /v1 route, which its "
                "dispatcher (api/http/dispatch.py) would skip; admission belongs in "
                "api/http/admission.py"
            )
