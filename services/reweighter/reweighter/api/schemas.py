"""The HTTP contract as pydantic models: what /openapi.json documents and FastAPI parses.

These models only check the wire format (types, no unknown keys).
Every rule about meaning (lengths, limits, method names, parameters) lives in the engine, so
HTTP and gRPC reject the same requests with the same messages.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

Number = StrictFloat | StrictInt
"""A JSON number; strict so that "1" or true is rejected instead of silently converted."""

# NaN and infinity pass through to the engine, which rejects them with the same message on
# both transports (JSON has no NaN, but Python clients can send it).
_WIRE = ConfigDict(extra="forbid")


class GroupIn(BaseModel):
    model_config = _WIRE

    id: StrictStr | None = Field(None, description="echoed back in the result")
    rewards: list[Number] = Field(..., description="one base reward per completion")
    completions: list[StrictStr] | None = Field(
        None, description="the group's completions (texts); or give `embeddings`"
    )
    embeddings: list[list[Number]] | None = Field(
        None, description="precomputed vectors, one per completion ([G][D]); or give `completions`"
    )


class ReweightIn(BaseModel):
    model_config = _WIRE

    method: StrictStr = Field("dra", description="dra | mmr | none (see GET /v1/info)")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "the chosen method's parameters only: dra {similarity_floor: number | null}, "
            'mmr {lambda: number in [0, 1] | "adaptive"}'
        ),
    )
    advantages: StrictStr = Field("none", description="grpo | dr_grpo | none")
    groups: list[GroupIn]


class GroupStatsOut(BaseModel):
    mean_similarity: float = Field(..., description="mean cosine similarity over distinct pairs")
    lambda_: float | None = Field(
        None, alias="lambda", description="the MMR trade-off used (MMR only; absent otherwise)"
    )


class GroupOut(BaseModel):
    id: str | None
    rewards: list[float]
    advantages: list[float] | None = Field(None, description="absent when advantages = none")
    stats: GroupStatsOut


class ReweightOut(BaseModel):
    method: str
    model: str | None = Field(..., description="encoder id; null when all embeddings were given")
    groups: list[GroupOut]


class EmbedIn(BaseModel):
    model_config = _WIRE

    inputs: list[StrictStr] | StrictStr = Field(..., description="texts (or one text)")
    normalize: bool = Field(True, description="only true is supported: vectors are unit length")


class EmbedOut(BaseModel):
    model: str
    dim: int
    embeddings: list[list[float]]


class ErrorBody(BaseModel):
    message: str
    field: str | None = Field(None, description="the offending input as a dotted path")
    type: str = Field(..., description="InvalidInput, LimitExceeded, Overloaded, NotReady, ...")


class ErrorOut(BaseModel):
    error: ErrorBody
