"""The OpenAI embeddings API over the engine: `POST /v1/embeddings` and `GET /v1/models`.

The messages are OpenAI's (reweighter.wire.openai). The route is a thin edge like every other:
it calls `engine.aembed`, the same call as `/v1/embed`, so the same limits, dynamic batcher,
cache and metrics apply; it sits on the `/v1` router, so the same admission (admission.py) and
dispatcher (dispatch.py) serve it. Errors on these paths are in OpenAI's shape (errors.py, the
one error writer, asks `wire.openai.OPENAI_PATHS`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from ...config import Settings
from ...engine.surface import EngineSurface
from ...errors import InvalidInput, ModelNotFound, ReweighterError
from ...types import EmbedResult
from ...wire.openai import (
    EmbeddingsIn,
    EmbeddingsOut,
    ModelOut,
    ModelsOut,
    OpenAIErrorOut,
    embeddings_body,
)
from ..metrics import Metrics
from .dispatch import v1_router

_STARTED = int(time.time())

OPENAI_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": OpenAIErrorOut, "description": desc}
    for code, desc in {
        400: "invalid input (OpenAI answers bad input with 400; `param` names it), or a body "
        "that could not be read",
        401: "missing or wrong API key (`code`: invalid_api_key)",
        404: "a model this service does not serve (`code`: model_not_found)",
        405: "the path does not take this method (`Allow` names those it takes)",
        408: "the request's head or body was not sent in time (the connection layer)",
        413: "over the configured limits",
        429: "overloaded; retry with backoff (`Retry-After`)",
        503: "the model is still loading; retry",
        504: "the request's x-request-timeout passed, or its client went away, before it was "
        "computed",
    }.items()
}
"""What the OpenAI routes answer besides their success, in OpenAI's error shape (never 422: bad
input is 400 there). Given here, not inherited from /v1's ERROR_RESPONSES (our shape)."""


def served_model(engine: EngineSurface, settings: Settings) -> str:
    """The model id /v1/models lists: the loaded encoder's, else the configured or bundled one."""
    if engine.embedder is not None:
        return engine.embedder.model_id
    from ...embedding.sentence_transformers import BUNDLED_MODEL_ID

    return settings.model or BUNDLED_MODEL_ID


def accepts_model(name: str, served: str) -> bool:
    """The full id, or its last path segment ("all-MiniLM-L6-v2" for the bundled
    "sentence-transformers/all-MiniLM-L6-v2"): what users type after reading a model card."""
    return name in (served, PurePosixPath(served).name)


def _count_tokens(engine: EngineSurface, texts: Sequence[str]) -> int:
    """What the model read (usage.prompt_tokens): its tokenizer's count after the long-text
    policy, special tokens included; an encoder without a tokenizer estimates."""
    encoder = getattr(engine.embedder, "encoder", None)
    if encoder is None:
        return sum(max(1, len(t) // 4) for t in texts)
    return int(sum(encoder.count_tokens(texts)))


async def _aembed(engine: EngineSurface, texts: list[str]) -> EmbedResult:
    """engine.aembed, its errors naming OpenAI's field (`input`) instead of /v1/embed's."""
    try:
        return await engine.aembed(texts)
    except ReweighterError as e:
        if e.field is None or not e.field.startswith("inputs"):
            raise
        field = "input" + e.field.removeprefix("inputs")
        raise type(e)(e.message, field, http_status=e.http_status, grpc_code=e.grpc_code) from e


def build_openai_router(engine: EngineSurface, settings: Settings, metrics: Metrics) -> APIRouter:
    """Routes relative to the `/v1` router they are included in."""
    router = v1_router(tags=["openai"], responses=OPENAI_RESPONSES)

    @router.post("/embeddings", response_model=EmbeddingsOut)
    async def embeddings(body: EmbeddingsIn) -> Response:
        """OpenAI-compatible embeddings: the same unit vectors as /v1/embed, as floats or as
        base64 of little-endian float32 (`encoding_format`)."""
        with metrics.track("http", "embeddings"):
            served = served_model(engine, settings)
            if not accepts_model(body.model, served):
                raise ModelNotFound(
                    f"model {body.model!r} is not served here; GET /v1/models lists {served!r}",
                    field="model",
                )
            texts = body.texts()
            if engine.embedder is not None and body.dimensions not in (None, engine.embedder.dim):
                raise InvalidInput(
                    f"dimensions={body.dimensions} is not supported: {served} gives "
                    f"{engine.embedder.dim}-dimensional vectors (leave it out, or send "
                    f"{engine.embedder.dim})",
                    field="dimensions",
                )
            result, tokens = await asyncio.gather(
                _aembed(engine, texts), asyncio.to_thread(_count_tokens, engine, texts)
            )
            data = embeddings_body(result.embeddings, body.encoding_format, result.model, tokens)
            return Response(json.dumps(data, separators=(",", ":")), media_type="application/json")

    @router.get("/models", response_model=ModelsOut)
    async def models() -> ModelsOut:
        """The one model this service embeds with (OpenAI's model list)."""
        with metrics.track("http", "models"):
            return ModelsOut(data=[ModelOut(id=served_model(engine, settings), created=_STARTED)])

    return router
