"""What one group member sends and gets back; every transport converts to and from these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..types import AdvantageKind, GroupStats


@dataclass(frozen=True)
class MemberSubmission:
    """One completion of a group whose siblings arrive separately (other calls, other replicas).

    The group is reweighted in `member_id` string order once `group_size` distinct members are
    in, so the answer never depends on arrival order. Give `completion` or `embedding`.
    """

    group_id: str
    member_id: str
    group_size: int
    reward: float
    completion: str | None = None
    embedding: Sequence[float] | Any | None = None
    method: str = "dra"
    params: Mapping[str, Any] = field(default_factory=dict)
    advantages: AdvantageKind = "none"
    timeout_s: float | None = None
    """None: the server default (`assembly_timeout_s`); capped at `assembly_max_timeout_s`."""


@dataclass(frozen=True)
class MemberResult:
    """The member's reweighted reward; `complete` is False when its group timed out short."""

    group_id: str
    member_id: str
    reward: float
    """Reweighted; equals `raw_reward` when the group is incomplete."""
    raw_reward: float
    advantage: float | None
    """None unless advantages were asked for; when incomplete, over the members present."""
    complete: bool
    reason: str | None
    """None when complete; "timeout" when the group was still short at the deadline."""
    stats: GroupStats | None
    """The group's statistics as /v1/reweight gives them; None when incomplete."""
    members: int
    """How many members the answer was computed over (group_size when complete)."""
