"""The engine's request and result types: every transport converts to and from these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

AdvantageKind = Literal["grpo", "dr_grpo", "none"]


@dataclass(frozen=True)
class Group:
    """One prompt's completions. Give `completions` (texts) or `embeddings` ([G][D]), not both."""

    rewards: Sequence[float]
    completions: Sequence[str] | None = None
    embeddings: Sequence[Sequence[float]] | Any | None = None  # list of lists or a [G, D] array
    id: str | None = None


@dataclass(frozen=True)
class ReweightRequest:
    groups: Sequence[Group]
    method: str = "dra"
    params: Mapping[str, Any] = field(default_factory=dict)
    advantages: AdvantageKind = "none"


@dataclass(frozen=True)
class GroupStats:
    mean_similarity: float
    """Mean cosine similarity over distinct pairs (i < j); 1.0 for a group of one."""
    lambda_: float | None = None
    """The MMR trade-off used for this group; None for other methods."""


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
