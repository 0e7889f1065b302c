"""The request/answer calls over HTTP (`POST /v1/<call>`, reweighter.wire.calls): how one is
served, and a direct path for well-formed requests that skips FastAPI's machinery.

Why a direct path: the event loop is the one thread every request crosses, and on the way to
the engine FastAPI spent about 44 % of the loop's CPU per request on its own layers (routing
through the included routers twice, dependency resolution, re-validating the answer): the
host path, not the encoder, is what keeps a GPU waiting (BENCHMARKS "The host path"). So a
call whose body is JSON that its request model accepts is parsed by pydantic's JSON parser,
answered by the same `serve_call` as the FastAPI route, and written out directly.

Only that happy path is taken here: a body that does not parse or validate, or comes with
another content type, is passed on (its bytes replayed) to the FastAPI route, which answers
it exactly as it always did; the engine's own errors get the app's one error mapping
(`on_error`). The route stays declared in FastAPI, so /openapi.json documents it as before.
The key, the tenant, the deadline and the body limit are the outer middleware's (BodyLimit),
before either path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ...engine.surface import EngineSurface
from ...errors import ReweighterError
from ...wire.calls import CALLS, Call
from ...wire.http import answer, model, to_engine
from ..metrics import Metrics
from .middleware import replay


async def serve_call(call: Call, engine: EngineSurface, metrics: Metrics, body: Any) -> BaseModel:
    """One call, its body parsed: counted and timed, the engine coroutine, the answer model.
    The FastAPI route and the direct path both run exactly this."""
    with metrics.track("http", call.name, str(getattr(body, "method", ""))):
        request = to_engine(body)
        if call.size is not None:
            metrics.completions.labels("http").observe(call.size(request))
        return answer(await getattr(engine, call.engine)(request))


def json_content(scope: Scope) -> bool:
    """Whether the request says its body is JSON: application/json or application/<x>+json,
    which every FastAPI version reads as JSON. A request without a content type is left to
    FastAPI: its versions differ there (0.165 refuses it by default, older ones parse it)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            kind = value.decode("latin-1").split(";", 1)[0].strip().lower()
            main, _, sub = kind.partition("/")
            return main == "application" and (sub == "json" or sub.endswith("+json"))
    return False


class CallFastPath:
    """ASGI middleware: `POST /v1/<call>` with a body its request model accepts is served here;
    everything else goes on to `app` (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        engine: EngineSurface,
        metrics: Metrics,
        on_error: Callable[[str, ReweighterError], Awaitable[Response] | Response],
    ) -> None:
        self.app, self.engine, self.metrics, self.on_error = app, engine, metrics, on_error
        self.calls = {c.path: (c, model(c.request, True)) for c in CALLS.values()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry = self.calls.get(scope.get("path", "")) if scope["type"] == "http" else None
        if entry is None or scope.get("method") != "POST" or not json_content(scope):
            await self.app(scope, receive, send)
            return
        call, request_model = entry
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away while sending: nobody to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            parsed = request_model.model_validate_json(body) if body else None
        except ValidationError:
            parsed = None
        if parsed is None:  # FastAPI's route answers it, with its own messages
            await self.app(scope, replay(body, receive), send)
            return
        try:
            out = await serve_call(call, self.engine, self.metrics, parsed)
        except ReweighterError as exc:
            response = self.on_error(scope["path"], exc)
            if not isinstance(response, Response):
                response = await response
        else:
            response = Response(out.model_dump_json(by_alias=True), media_type="application/json")
        await response(scope, receive, send)

