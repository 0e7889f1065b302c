"""The engine's vocabulary: request and result types every transport converts to and from, and
the three closed sets of names (method, advantage kind, long-text policy), defined here once.

The names are `StrEnum`s: they compare equal to their plain strings ("dra" == Method.DRA), so
callers may pass either, pydantic and the OpenAPI schema list their values, and the engine turns
a string into a member exactly once (`parse_name`), naming the field when it is not one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from typing_extensions import TypedDict  # pydantic (FastAPI's response_model) needs it on 3.11

from .errors import InvalidInput


class Method(StrEnum):
    """The built-in reweighting methods, as typed constants. The set of methods the service
    accepts is the catalogue (reweighter.methods.catalog), which lists these and any added one:
    code judges a name against the catalogue, never against this enum."""

    DRA = "dra"
    MMR = "mmr"
    DARLING = "darling"
    OUTCOME_UCB = "outcome_ucb"
    NONE = "none"


DEFAULT_METHOD = Method.DRA


class AdvantageKind(StrEnum):
    """Group-relative advantage estimators computed after reweighting (methods/advantages.py)."""

    GRPO = "grpo"
    DR_GRPO = "dr_grpo"
    PASS_AT_K = "pass_at_k"
    NONE = "none"


class LongTextPolicy(StrEnum):
    """How texts longer than the encoder window are embedded (docs/embedding.md)."""

    HEAD = "head"
    TAIL = "tail"
    CHUNK_MEAN = "chunk_mean"


E = TypeVar("E", bound=StrEnum)


def parse_name(kind: type[E], value: object, field: str, what: str) -> E:
    """`value` as a member of `kind`, or InvalidInput naming `field` and the known names."""
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise InvalidInput(f"unknown {what} {value!r}; known: {known}", field=field) from None


@dataclass(frozen=True)
class Group:
    """One prompt's completions. Give `completions` (texts) or `embeddings` ([G][D]), not both."""

    rewards: Sequence[float]
    completions: Sequence[str] | None = None
    embeddings: Sequence[Sequence[float]] | Any | None = None  # list of lists or a [G, D] array
    id: str | None = None
    answers: Sequence[str | None] | None = None
    """The canonical final answer per completion (None: none extracted); answer classes for
    darling, the counted outcome for outcome_ucb, `stats.distinct_answers`."""
    prompt_key: str | None = None
    """A stable key of the group's prompt across steps (outcome_ucb's memory)."""


@dataclass(frozen=True)
class ReweightRequest:
    groups: Sequence[Group]
    method: Method | str = DEFAULT_METHOD
    """A method name (a Method for the built-ins); the engine rejects names not in the method
    catalogue (field "method")."""
    params: Mapping[str, Any] = field(default_factory=dict)
    advantages: AdvantageKind | str = AdvantageKind.NONE
    advantage_params: Mapping[str, Any] = field(default_factory=dict)
    """The estimator's parameters (pass_at_k: k, success_threshold)."""
    step: int | None = None
    """The trainer's global step (outcome_ucb's memory counts once per (prompt_key, step))."""


@dataclass(frozen=True)
class GroupStats:
    mean_similarity: float
    """Mean cosine similarity over distinct pairs (i < j); 1.0 for a group of one."""
    lambda_: float | None = None
    """The MMR trade-off used for this group; None for other methods."""
    effective_size: float | None = None
    """n^2 / sum_ij max(0, s_ij): 1 for identical completions, n for orthogonal ones."""
    distinct_answers: int | None = None
    """Distinct non-null answers, when the group carried answers."""
    classes: int | None = None
    """Answer classes the method used (darling), else None."""


@dataclass(frozen=True)
class GroupResult:
    id: str | None
    rewards: list[float]
    advantages: list[float] | None
    stats: GroupStats


@dataclass(frozen=True)
class ReweightResult:
    method: str
    model: str | None
    """Encoder id, or None when every group came with embeddings."""
    groups: list[GroupResult]


@dataclass(frozen=True)
class EmbedResult:
    model: str
    dim: int
    embeddings: Any  # numpy float32 [N, D]


class MethodInfo(TypedDict):
    description: str
    params: dict[str, Any]
    """The parameters' JSON schema."""


class EngineInfo(TypedDict):
    """What `info()` reports on every transport (GET /v1/info, the Info RPC)."""

    version: str
    model: str | None
    dim: int | None
    device: str | None
    precision: str | None
    """Encoder precision in use (fp32, int8, fp16, bf16); None until the model is loaded."""
    ready: bool
    long_text: str
    methods: dict[str, MethodInfo]
    advantages: list[str]
    limits: dict[str, int]
