"""The HTTP contract as pydantic models: what /openapi.json documents, FastAPI parses and emits,
and the HTTP clients parse answers with. Each model converts to and from the engine's types.

Request models check only the wire format (types, no unknown keys). Every rule about meaning
(lengths, limits, method names, parameters) lives in the engine, so HTTP and gRPC reject the
same requests with the same messages; the method and advantage names are still published as
enums (from reweighter.types) so generated clients see the choices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)

from ...assembly.types import MemberReason, MemberResult, MemberSubmission
from ...errors import InvalidInput, ReweighterError, error_from
from ...methods.catalog import CATALOG, method_names
from ...types import (
    DEFAULT_METHOD,
    AdvantageKind,
    EmbedResult,
    Group,
    GroupResult,
    GroupStats,
    ReweightRequest,
    ReweightResult,
)

Number = StrictFloat | StrictInt
"""A JSON number; strict so that "1" or true is rejected instead of silently converted."""


def _names(enum: type[AdvantageKind], doc: str) -> Any:
    """A string the engine judges, documented as the enum it must be."""
    schema = {"type": "string", "enum": [m.value for m in enum], "description": doc}
    return Annotated[StrictStr, WithJsonSchema(schema)]


class _MethodSchema:
    """The method names as an enum, read from the catalogue when the schema is generated (so a
    method added to the catalogue is documented without touching this file)."""

    def __get_pydantic_json_schema__(self, core: Any, handler: GetJsonSchemaHandler) -> Any:
        doc = "reweighting method (see GET /v1/info)"
        return {"type": "string", "enum": method_names(), "description": doc}


MethodName = Annotated[StrictStr, _MethodSchema()]
AdvantageName = _names(AdvantageKind, "advantage estimator computed after reweighting")

# NaN and infinity pass through to the engine, which rejects them with the same message on
# both transports (JSON has no NaN, but Python clients can send it).
_WIRE = ConfigDict(extra="forbid")
# Documented for generated clients; the engine still judges (its messages name the field).
_NON_EMPTY: dict[str, Any] = {"minItems": 1}


def _params_schema(schema: dict[str, Any]) -> None:
    """`params` as one of the methods' parameter schemas (the models the engine validates)."""
    schema["anyOf"] = [
        {"title": str(name), **spec.params_model.model_json_schema(by_alias=True)}
        for name, spec in CATALOG.items()
    ]


_ABSENT_IF_NONE = {"default": None, "exclude_if": lambda v: v is None}


class GroupIn(BaseModel):
    model_config = _WIRE

    id: StrictStr | None = Field(None, description="echoed back in the result")
    rewards: list[Number] = Field(
        ..., description="one base reward per completion", json_schema_extra=_NON_EMPTY
    )
    completions: Annotated[list[StrictStr], Field(json_schema_extra=_NON_EMPTY)] | None = Field(
        None, description="the group's completions (texts); or give `embeddings`"
    )
    embeddings: Annotated[list[list[Number]], Field(json_schema_extra=_NON_EMPTY)] | None = Field(
        None, description="precomputed vectors, one per completion ([G][D]); or give `completions`"
    )

    def to_group(self) -> Group:
        return Group(self.rewards, self.completions, self.embeddings, self.id)


class ReweightIn(BaseModel):
    model_config = _WIRE

    method: MethodName = DEFAULT_METHOD.value
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the chosen method's parameters only (their schemas: GET /v1/info)",
        json_schema_extra=_params_schema,
    )
    advantages: AdvantageName = AdvantageKind.NONE.value
    groups: list[GroupIn] = Field(..., json_schema_extra=_NON_EMPTY)

    def to_request(self) -> ReweightRequest:
        return ReweightRequest(
            groups=[g.to_group() for g in self.groups],
            method=self.method,
            params=self.params,
            advantages=self.advantages,
        )

    @staticmethod
    def wire(request: ReweightRequest) -> dict[str, Any]:
        """The JSON body for `request`, built without validation (clients send it as it is, NaN
        included, so the server judges it and names the field)."""
        groups = []
        for g in request.groups:
            out: dict[str, Any] = {"rewards": [float(r) for r in g.rewards]}
            if g.id is not None:
                out["id"] = g.id
            if g.completions is not None:
                out["completions"] = list(g.completions)
            if g.embeddings is not None:
                out["embeddings"] = np.asarray(g.embeddings, dtype=np.float64).tolist()
            groups.append(out)
        return {
            "method": str(request.method),
            "params": dict(request.params),
            "advantages": str(request.advantages),
            "groups": groups,
        }


class GroupStatsOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    mean_similarity: float = Field(..., description="mean cosine similarity over distinct pairs")
    lambda_: float | None = Field(
        **_ABSENT_IF_NONE, alias="lambda", description="the MMR trade-off used (MMR only)"
    )


class GroupOut(BaseModel):
    id: str | None
    rewards: list[float]
    advantages: list[float] | None = Field(
        **_ABSENT_IF_NONE, description="absent when advantages = none"
    )
    stats: GroupStatsOut


class ReweightOut(BaseModel):
    method: str
    model: str | None = Field(..., description="encoder id; null when all embeddings were given")
    groups: list[GroupOut]

    @classmethod
    def from_result(cls, result: ReweightResult) -> ReweightOut:
        return cls.model_validate(result, from_attributes=True)

    def to_result(self) -> ReweightResult:
        return ReweightResult(
            method=self.method,
            model=self.model,
            groups=[
                GroupResult(
                    id=g.id,
                    rewards=g.rewards,
                    advantages=g.advantages,
                    stats=GroupStats(g.stats.mean_similarity, g.stats.lambda_),
                )
                for g in self.groups
            ],
        )


class EmbedIn(BaseModel):
    model_config = _WIRE

    inputs: list[StrictStr] | StrictStr = Field(..., description="texts (or one text)")
    normalize: bool = Field(True, description="only true is supported: vectors are unit length")

    def texts(self) -> list[str]:
        if not self.normalize:
            raise InvalidInput(
                "only normalize=true is supported: the encoder returns unit vectors",
                field="normalize",
            )
        return [self.inputs] if isinstance(self.inputs, str) else self.inputs

    @staticmethod
    def wire(texts: Sequence[str]) -> dict[str, Any]:
        return {"inputs": list(texts)}


class EmbedOut(BaseModel):
    model: str
    dim: int
    embeddings: list[list[float]]

    @classmethod
    def from_result(cls, result: EmbedResult) -> EmbedOut:
        rows = np.asarray(result.embeddings, dtype=np.float32).tolist()
        return cls.model_construct(model=result.model, dim=result.dim, embeddings=rows)

    def to_result(self) -> EmbedResult:
        arr = np.asarray(self.embeddings, dtype=np.float32).reshape(-1, self.dim)
        return EmbedResult(model=self.model, dim=self.dim, embeddings=arr)


class StatusOut(BaseModel):
    status: str


class ErrorBody(BaseModel):
    message: str
    field: str | None = Field(None, description="the offending input as a dotted path")
    type: str = Field(..., description="InvalidInput, LimitExceeded, Overloaded, NotReady, ...")


class ErrorOut(BaseModel):
    error: ErrorBody

    @classmethod
    def from_error(cls, exc: ReweighterError) -> ErrorOut:
        return cls(error=ErrorBody(message=exc.message, field=exc.field, type=type(exc).__name__))

    def to_error(self, retry_after: float | None = None) -> ReweighterError:
        e = self.error
        return error_from(e.type, e.message, e.field, retry_after=retry_after)


# -- group assembly (docs/integrations.md) -------------------------------------------------


class MemberIn(BaseModel):
    """One member of a group whose siblings arrive in other calls (POST /v1/groups/{id}/members)."""

    model_config = _WIRE

    member_id: StrictStr = Field(..., description="unique in the group; sets the group's order")
    group_size: StrictInt = Field(..., description="distinct members that make the group whole")
    reward: Number = Field(..., description="the member's base reward")
    completion: StrictStr | None = Field(None, description="the completion; or give `embedding`")
    embedding: list[Number] | None = Field(None, description="a precomputed vector")
    method: MethodName = DEFAULT_METHOD.value
    params: dict[str, Any] = Field(
        default_factory=dict, description="as /v1/reweight; the same for every member"
    )
    advantages: AdvantageName = AdvantageKind.NONE.value
    timeout_s: Number | None = Field(
        None, description="seconds to wait for the group; server default and cap if absent/over"
    )

    def to_submission(self, group_id: str) -> MemberSubmission:
        """The body's fields are the submission's, by name (the group id is the path's)."""
        return MemberSubmission(group_id=group_id, **dict(self))

    @staticmethod
    def wire(sub: MemberSubmission) -> dict[str, Any]:
        """The JSON body for `sub` (group_id goes in the path), unvalidated as ReweightIn.wire."""
        out: dict[str, Any] = {
            "member_id": sub.member_id,
            "group_size": sub.group_size,
            "reward": float(sub.reward),
            "method": str(sub.method),
            "params": dict(sub.params or {}),
            "advantages": str(sub.advantages),
        }
        if sub.completion is not None:
            out["completion"] = sub.completion
        if sub.embedding is not None:
            out["embedding"] = np.asarray(sub.embedding, dtype=np.float64).ravel().tolist()
        if sub.timeout_s is not None:
            out["timeout_s"] = float(sub.timeout_s)
        return out


class MemberOut(BaseModel):
    group_id: str
    member_id: str
    reward: float = Field(..., description="reweighted; equals raw_reward when incomplete")
    raw_reward: float
    advantage: float | None = Field(None, description="null unless advantages were asked for")
    complete: bool = Field(..., description="false: the answer is raw, see reason")
    reason: MemberReason | None = Field(
        None, description="null when complete; else why not (docs/integrations.md)"
    )
    stats: GroupStatsOut | None = Field(None, description="the group's; null when incomplete")
    members: int = Field(..., description="members the answer was computed over")
    round: int = Field(0, description="the round of group_id the member was in (0 first)")

    @classmethod
    def from_result(cls, r: MemberResult) -> MemberOut:
        return cls.model_validate(r, from_attributes=True)

    def to_result(self) -> MemberResult:
        s = self.stats
        stats = None if s is None else GroupStats(s.mean_similarity, s.lambda_)
        return MemberResult(**self.model_dump(exclude={"stats"}), stats=stats)
