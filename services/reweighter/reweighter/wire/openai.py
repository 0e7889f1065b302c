"""The OpenAI embeddings API's messages (`POST /v1/embeddings`, `GET /v1/models`), defined once.

These shapes are OpenAI's, not ours: every embedding server (TEI, infinity, vLLM) answers them and
every tool speaks them (the `openai` SDK, LangChain, AIPerf). So unlike the messages derived from
reweighter.types, they are written out here, field for field as OpenAI documents them, and the
route (api/http/openai.py), its error mapping and the tests all use these models.

What the route does with each field is documented on the field: `encoding_format` "base64" is the
vectors' little-endian float32 bytes (what the SDK asks for by default and decodes itself);
`dimensions` is refused unless it equals the model's (no Matryoshka truncation: MiniLM was not
trained for it); `user` is accepted and ignored; token-id inputs are refused naming `input`.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ..errors import ReweighterError, Unauthenticated

OPENAI_PATHS = frozenset({"/v1/embeddings", "/v1/models"})
"""The paths whose errors are in OpenAI's shape (`OpenAIErrorOut`), not ours."""


class EmbeddingsIn(BaseModel):
    """`POST /v1/embeddings` (OpenAI's `CreateEmbeddingRequest`)."""

    model_config = ConfigDict(extra="forbid")

    input: StrictStr | list[StrictStr] = Field(
        description="a text or a list of texts (token-id arrays are not supported)"
    )
    model: StrictStr = Field(description="the served model: an id that GET /v1/models lists")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: lists of numbers; base64: little-endian float32 bytes"
    )
    dimensions: StrictInt | None = Field(
        None, description="accepted only when equal to the model's dimension (no truncation)"
    )
    user: StrictStr | None = Field(None, description="accepted and ignored")

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class EmbeddingOut(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="floats, or base64 of float32 LE bytes")


class UsageOut(BaseModel):
    prompt_tokens: int = Field(description="word pieces the model read, special tokens included")
    total_tokens: int


class EmbeddingsOut(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingOut]
    model: str
    usage: UsageOut


class ModelOut(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "reweighter"


class ModelsOut(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelOut]


class OpenAIErrorBody(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, rate_limit_error, server_error, ...")
    param: str | None = Field(None, description="the request field at fault")
    code: str | None = None


class OpenAIErrorOut(BaseModel):
    error: OpenAIErrorBody


def encode_vectors(vectors: np.ndarray, encoding_format: str) -> list[Any]:
    """Each row as OpenAI carries it: a list of floats, or base64 of its float32 LE bytes."""
    if encoding_format == "base64":
        le = np.ascontiguousarray(vectors, dtype="<f4")
        return [base64.b64encode(row.tobytes()).decode("ascii") for row in le]
    return np.asarray(vectors, dtype=np.float32).tolist()  # type: ignore[no-any-return]


def embeddings_body(
    vectors: np.ndarray, encoding_format: str, model: str, tokens: int
) -> dict[str, Any]:
    """The answer as a plain dict (serialised as is: building pydantic objects for thousands of
    floats would cost more than the JSON itself); its shape is `EmbeddingsOut`'s."""
    rows = encode_vectors(vectors, encoding_format)
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(rows)],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error"}
_TYPES.update({413: "invalid_request_error", 422: "invalid_request_error"})
_TYPES.update({429: "rate_limit_error", 503: "server_error"})


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def openai_status(exc: ReweighterError) -> int:
    """OpenAI answers bad input with 400 (we answer 422 elsewhere); the rest keep their code."""
    return 400 if exc.http_status == 422 else exc.http_status


def openai_error(exc: ReweighterError) -> OpenAIErrorOut:
    """Our error in OpenAI's shape: `param` is the field we name; `code` the error class in
    snake case (`invalid_api_key` for a missing or wrong key, as OpenAI says it)."""
    status = openai_status(exc)
    code = "invalid_api_key" if isinstance(exc, Unauthenticated) else _snake(type(exc).__name__)
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return OpenAIErrorOut(
        error=OpenAIErrorBody(message=exc.message, type=kind, param=exc.field, code=code)
    )
