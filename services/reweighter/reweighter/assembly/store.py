"""Where assembly state lives: one small interface, in process by default, Redis when configured.

The store holds opaque strings (the assembler encodes them): per open group a meta string (what
every member must agree on) and member records; per finished group one result string. Each
operation is atomic, so the assembler's rules are the same whichever store is behind it, and
every piece of state expires: open groups `open_ttl_s` after their last arrival, results
`result_ttl_s` after they were written.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["added", "exists", "done", "precondition", "full", "overloaded"]


@dataclass(frozen=True)
class AddOutcome:
    """What `add` found. `value`: the stored member record (exists), result (done), group meta
    (precondition), or which bound was hit, "groups" or "members" (overloaded)."""

    kind: Outcome
    count: int = 0
    value: str = ""


@dataclass(frozen=True)
class Limits:
    max_open_groups: int
    max_held_members: int
    open_ttl_s: float
    result_ttl_s: float


class AssemblyStore:
    """Atomic operations on assembly state. `polling`: whether completion can be missed by
    `on_done` (a lost pub/sub message), so waiters should also poll."""

    polling: bool = False

    async def add(
        self, group_id: str, member_id: str, meta: str, record: str, group_size: int
    ) -> AddOutcome:
        """Add a member unless: the group is finished (done), its meta differs (precondition),
        the member is already there (exists), the group is full (full) or a bound is hit."""
        raise NotImplementedError

    async def poll(self, group_id: str) -> tuple[str | None, int]:
        """(result or None, members held)."""
        raise NotImplementedError

    async def members(self, group_id: str) -> dict[str, str]:
        raise NotImplementedError

    async def claim(self, group_id: str, token: str, ttl_s: float) -> bool:
        """Take the right to compute the group (once across replicas) for ttl_s."""
        raise NotImplementedError

    async def release(self, group_id: str, token: str) -> None:
        raise NotImplementedError

    async def finish(self, group_id: str, result: str) -> str:
        """Store the result and drop the group's members; returns the result that won (a
        result already there is kept). Wakes every replica's waiters through `on_done`."""
        raise NotImplementedError

    async def start(self, on_done: Callable[[str], None]) -> None:
        """Begin delivering group ids of finished groups to `on_done` (on the running loop)."""

    async def counts(self) -> tuple[int, int]:
        """(open groups, held members) across the whole store."""
        raise NotImplementedError

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections and tasks."""


@dataclass
class _Open:
    meta: str
    members: dict[str, str] = field(default_factory=dict)
    expires: float = 0.0


class MemoryStore(AssemblyStore):
    """One process's state in dicts. Operations never await, so each is atomic on the loop.

    TTLs are constant, so insertion order (refreshed with move_to_end) is expiry order and
    pruning only ever looks at the front of each dict.
    """

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._results: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._claims: dict[str, tuple[str, float]] = {}
        self._held = 0
        self._on_done: Callable[[str], None] | None = None

    def _prune(self, now: float) -> None:
        while self._open:
            gid, group = next(iter(self._open.items()))
            if group.expires > now:
                break
            self._drop(gid)
        while self._results:
            gid, (_, expires) = next(iter(self._results.items()))
            if expires > now:
                break
            del self._results[gid]
        for gid in [g for g, (_, exp) in self._claims.items() if exp <= now]:
            del self._claims[gid]

    def _drop(self, gid: str) -> None:
        group = self._open.pop(gid, None)
        if group is not None:
            self._held -= len(group.members)

    async def add(
        self, group_id: str, member_id: str, meta: str, record: str, group_size: int
    ) -> AddOutcome:
        now = self._clock()
        self._prune(now)
        if group_id in self._results:
            return AddOutcome("done", value=self._results[group_id][0])
        group = self._open.get(group_id)
        if group is not None and group.meta != meta:
            return AddOutcome("precondition", len(group.members), group.meta)
        if group is not None and member_id in group.members:
            self._touch(group_id, group, now)
            return AddOutcome("exists", len(group.members), group.members[member_id])
        if group is not None and len(group.members) >= group_size:
            return AddOutcome("full", len(group.members))
        if group is None and len(self._open) >= self.limits.max_open_groups:
            return AddOutcome("overloaded", value="groups")
        if self._held >= self.limits.max_held_members:
            return AddOutcome("overloaded", value="members")
        if group is None:
            group = self._open[group_id] = _Open(meta)
        group.members[member_id] = record
        self._held += 1
        self._touch(group_id, group, now)
        return AddOutcome("added", len(group.members))

    def _touch(self, gid: str, group: _Open, now: float) -> None:
        group.expires = now + self.limits.open_ttl_s
        self._open.move_to_end(gid)

    async def poll(self, group_id: str) -> tuple[str | None, int]:
        self._prune(self._clock())
        if group_id in self._results:
            return self._results[group_id][0], 0
        group = self._open.get(group_id)
        return None, len(group.members) if group else 0

    async def members(self, group_id: str) -> dict[str, str]:
        group = self._open.get(group_id)
        return dict(group.members) if group else {}

    async def claim(self, group_id: str, token: str, ttl_s: float) -> bool:
        now = self._clock()
        self._prune(now)
        if group_id in self._claims:
            return False
        self._claims[group_id] = (token, now + ttl_s)
        return True

    async def release(self, group_id: str, token: str) -> None:
        if self._claims.get(group_id, ("",))[0] == token:
            del self._claims[group_id]

    async def finish(self, group_id: str, result: str) -> str:
        now = self._clock()
        self._prune(now)
        if group_id in self._results:
            return self._results[group_id][0]
        self._results[group_id] = (result, now + self.limits.result_ttl_s)
        self._drop(group_id)
        self._claims.pop(group_id, None)
        if self._on_done is not None:
            self._on_done(group_id)
        return result

    async def start(self, on_done: Callable[[str], None]) -> None:
        self._on_done = on_done

    async def counts(self) -> tuple[int, int]:
        self._prune(self._clock())
        return len(self._open), self._held
