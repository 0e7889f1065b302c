"""What one group member sends and gets back; every transport converts to and from these.

Torch-free (vocabulary only), so clients can import it without the service's dependencies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..types import DEFAULT_METHOD, AdvantageKind, GroupStats, Method


class MemberReason(StrEnum):
    """Why an answer is incomplete (`MemberResult.reason`); None when it is complete."""

    SHORT = "short"
    """The round closed at a member's deadline with fewer than group_size members: `members`
    says how many were present. Every member of the round gets this same answer."""
    COMPUTING = "computing"
    """The group was whole (`members` == group_size) but still being reweighted when this
    member's deadline came; a retry after it finishes gets the complete answer."""
    STORE_UNAVAILABLE = "store_unavailable"
    """The shared store (Redis) did not answer by the deadline: `members` counts only the
    members that waited on the same replica."""


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
    method: Method | str = DEFAULT_METHOD
    params: Mapping[str, Any] = field(default_factory=dict)
    advantages: AdvantageKind | str = AdvantageKind.NONE
    timeout_s: float | None = None
    """None: the server default (`assembly_timeout_s`); capped at `assembly_max_timeout_s`."""
    reuse_ids: bool = False
    """The caller reuses member ids across rounds of one group id on purpose: a member id
    already answered, sent with another payload, joins the next round. False (the default):
    that is a 409 naming the field, since it is usually a bug (a non-deterministic reward, an
    id collision). The same payload is a retry either way."""


@dataclass(frozen=True)
class MemberResult:
    """The member's reweighted reward; `complete` is False when `reason` says why not."""

    group_id: str
    member_id: str
    reward: float
    """Reweighted; equals `raw_reward` when the answer is incomplete."""
    raw_reward: float
    advantage: float | None
    """None unless advantages were asked for; when incomplete, over the `members` counted, from
    their raw rewards (method "none")."""
    complete: bool
    reason: MemberReason | None
    """None when complete; else why not (MemberReason)."""
    stats: GroupStats | None
    """The group's statistics as /v1/reweight gives them; None when incomplete."""
    members: int
    """How many members the answer was computed over (group_size when complete)."""
    round: int = 0
    """Which round of `group_id` the member was in: 0, or more when it arrived after earlier
    rounds of the same group id had been answered (a late or extra member, or a reused id)."""
