"""What the planner reads and what it returns: the pending work's shape, the round's bound, the
round as ranges. No logic beyond reading it.

Why apart: the fairness rules (fairness.py), the length index (index.py) and the round's
packing (packing.py) all read these types. The planner asks only for the protocols here, which
the batcher's own state (embedding/jobs.py) meets, so it is tested with plain fakes (no
threads, models or clocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from reweighter.embedding.base import Budget, Piece


class PendingJob(Protocol):
    """One distinct text in flight, as the policy sees it."""

    @property
    def pieces(self) -> Sequence[Piece] | None:
        """Its pieces; None while it is still being split (not schedulable yet)."""

    @property
    def scheduled(self) -> int:
        """How many of its pieces earlier rounds took."""

    @property
    def finished(self) -> bool:
        """Computed or failed: nothing left to schedule."""


J = TypeVar("J", bound=PendingJob)


class PendingRequest(Protocol[J]):
    """One caller's request: its distinct texts and its place in the rotation."""

    @property
    def jobs(self) -> Sequence[J]: ...

    @property
    def turn(self) -> int:
        """The last round that served it (-1: never)."""

    @property
    def seq(self) -> int:
        """Arrival order."""

    # Optional (read with getattr; absent: one tenant, "default", weight 1):
    # tenant: str -- whose request it is; weight: float -- that tenant's weight;
    # length_index: LengthIndex -- its texts by next-piece length (kept by the batcher).


R = TypeVar("R", bound=PendingRequest)

DEFAULT_TENANT = "default"


def tenant_of(req: object) -> str:
    return getattr(req, "tenant", DEFAULT_TENANT)


def weight_of(req: object) -> float:
    return getattr(req, "weight", 1.0)


def schedulable(job: PendingJob, at: int | None = None) -> bool:
    """Whether `job` has a piece at `at` (default: its first unscheduled one) to hand out."""
    if job.pieces is None or job.finished:
        return False
    return (job.scheduled if at is None else at) < len(job.pieces)


@dataclass(frozen=True)
class RoundBudget:
    """What bounds one round: the padded batch, and the fair slice of one request."""

    batch: Budget
    slice_tokens: int


@dataclass(frozen=True)
class Range(Generic[J]):
    """Pieces `start:end` of `job`."""

    job: J
    start: int
    end: int


@dataclass(frozen=True)
class Slice(Generic[R, J]):
    """What one request contributes to a round (the request each text was taken for)."""

    request: R
    ranges: tuple[Range[J], ...]
