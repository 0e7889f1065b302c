"""Where assembly state lives: one small interface, in process by default, Redis when configured.

Per group id the store holds at most one *open round* (its meta, what every member must agree
on, and its member records) and the *results* of answered rounds (reweighted when the round was
whole, raw when it closed short at a deadline). A member never joins an answered round: once a
round has a result, the next arrival that is not a retry of it opens round + 1. Each operation is
atomic and `add` takes the transitions of machine.py (the one description both stores follow),
so the assembler's rules are the same whichever store is behind it. Every piece of state
expires, on the store's one clock (this process's monotonic clock here; Redis's `TIME` for
every replica sharing a Redis): an open round at the latest deadline of its members (plus
`ttl_s`'s margin; the assembler closes it sooner, at the first deadline or when it is whole),
results `result_ttl_s` after they were written. Records are the typed, versioned models of
records.py.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..limits import AssemblyLimits
from .machine import Added, AddOutcome, Arrival, Exists, View, decide
from .records import GroupMeta, MemberRecord, OpenRound, RoundResult


def stop_if_cancelled(error: Exception) -> None:
    """Re-raise a cancel that a client library turned into its own error (redis-py reports a
    cancelled read as a ConnectionError): a loop that retries on errors must still stop."""
    me = asyncio.current_task()
    if me is not None and me.cancelling():
        raise asyncio.CancelledError from error


OnDone = Callable[[str, int], None]
"""Called with (group id, round) when a round gets its result."""


class AssemblyStore:
    """Atomic operations on assembly state. `polling`: whether completion can be missed by
    `on_done` (a lost pub/sub message), so waiters should also poll; `remote`: whether a call
    can wait on the network (the assembler bounds those by the member's deadline)."""

    polling: bool = False
    remote: bool = True

    async def add(
        self,
        group_id: str,
        member_id: str,
        meta: GroupMeta,
        record: MemberRecord,
        group_size: int,
        ttl_s: float,
        after_round: int = -1,
    ) -> AddOutcome:
        """Add a member to the group's open round by the rules of machine.RULES, in their
        order: a round answered that the caller has not seen (its own latest round, when
        `after_round` < 0, else the group's latest after `after_round`; the caller answers a
        retry from it, or calls again with `after_round` = that round), the open round's meta
        differs, the member is in it (its expiry extended to `ttl_s` from now), it is whole, a
        bound is hit, or the member joins (opening round latest + 1)."""
        args = (group_id, member_id, meta, record, group_size, ttl_s, after_round)
        return await self._add(Arrival(*args))

    async def _add(self, a: Arrival) -> AddOutcome:
        """`add`, in a store."""
        raise NotImplementedError

    async def poll(self, group_id: str, round: int) -> tuple[RoundResult | None, int]:
        """(the round's result or None, members held when it is the open round, else 0)."""
        raise NotImplementedError

    async def members(self, group_id: str) -> OpenRound | None:
        """The open round, or None."""
        raise NotImplementedError

    async def claim(self, group_id: str, token: str, ttl_s: float) -> bool:
        """Take the right to compute or close the open round (once across replicas) for ttl_s."""
        raise NotImplementedError

    async def renew(self, group_id: str, token: str, ttl_s: float) -> bool:
        """Keep our claim `ttl_s` longer while its compute runs; False when it is not ours."""
        raise NotImplementedError

    async def release(self, group_id: str, token: str) -> None:
        raise NotImplementedError

    async def finish(self, group_id: str, result: RoundResult) -> RoundResult | None:
        """Store the round's result and drop its members, if that round is still open with
        exactly `result.ids` members; returns the round's stored result (a result already there
        wins), or None when the round is no longer as read (expired, or a member arrived: read
        it again). Wakes every replica's waiters through `on_done`."""
        raise NotImplementedError

    async def start(self, on_done: OnDone) -> None:
        """Begin delivering finished rounds to `on_done` (on the running loop)."""

    async def counts(self) -> tuple[int, int]:
        """(open groups, held members) across the whole store: its fill against the bounds."""
        raise NotImplementedError

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections and tasks."""


@dataclass
class _Open:
    round: int
    meta: GroupMeta
    expires: float
    members: dict[str, MemberRecord] = field(default_factory=dict)


class MemoryStore(AssemblyStore):
    """One process's state in dicts. Operations never await, so each is atomic on the loop.

    Open rounds expire on a heap of (expiry, group id) with lazy deletion (a round's expiry only
    grows); results have one TTL, so their insertion order is their expiry order.
    """

    remote = False

    def __init__(self, limits: AssemblyLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._open: dict[str, _Open] = {}
        self._expiry: list[tuple[float, str]] = []
        self._results: OrderedDict[tuple[str, int], tuple[RoundResult, float]] = OrderedDict()
        self._latest: dict[str, int] = {}  # group id -> its last answered round
        self._answered: dict[str, dict[str, int]] = {}  # group id -> member -> its last round
        self._claims: dict[str, tuple[str, float]] = {}
        self._held = 0
        self._on_done: OnDone | None = None

    def _prune(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] <= now:
            _, gid = heapq.heappop(self._expiry)
            group = self._open.get(gid)
            if group is not None and group.expires <= now:
                self._drop(gid)
        while self._results:
            (gid, rnd), (_, expires) = next(iter(self._results.items()))
            if expires > now:
                break
            del self._results[(gid, rnd)]
            if self._latest.get(gid) == rnd:
                del self._latest[gid]
                self._answered.pop(gid, None)

    def _drop(self, gid: str) -> None:
        group = self._open.pop(gid, None)
        if group is not None:
            self._held -= len(group.members)
        self._claims.pop(gid, None)

    async def _add(self, a: Arrival) -> AddOutcome:
        now = self._clock()
        self._prune(now)
        gid = a.group_id
        own = self._answered.get(gid, {}).get(a.member_id) if a.after_round < 0 else None
        latest = self._latest.get(gid)
        group = self._open.get(gid)
        view = View(
            own=self._result(gid, own),
            latest=self._result(gid, latest),
            open_round=None if group is None else group.round,
            open_meta=None if group is None else group.meta,
            open_count=0 if group is None else len(group.members),
            open_record=None if group is None else group.members.get(a.member_id),
            groups=len(self._open),
            held=self._held,
        )
        _, out = decide(view, a, self.limits)
        match out:
            case Exists():
                assert group is not None
                self._extend(gid, group, now + a.ttl_s)
            case Added(round=rnd):
                if group is None:
                    group = self._open[gid] = _Open(rnd, a.meta, now)
                group.members[a.member_id] = a.record
                self._held += 1
                self._extend(gid, group, now + a.ttl_s)
        return out

    def _result(self, gid: str, rnd: int | None) -> RoundResult | None:
        hit = None if rnd is None else self._results.get((gid, rnd))
        return None if hit is None else hit[0]

    def _extend(self, gid: str, group: _Open, expires: float) -> None:
        if expires > group.expires:
            group.expires = expires
            heapq.heappush(self._expiry, (expires, gid))

    async def poll(self, group_id: str, round: int) -> tuple[RoundResult | None, int]:
        self._prune(self._clock())
        hit = self._results.get((group_id, round))
        if hit is not None:
            return hit[0], 0
        group = self._open.get(group_id)
        return None, len(group.members) if group is not None and group.round == round else 0

    async def members(self, group_id: str) -> OpenRound | None:
        self._prune(self._clock())
        g = self._open.get(group_id)
        return None if g is None else OpenRound(round=g.round, meta=g.meta, members=g.members)

    async def claim(self, group_id: str, token: str, ttl_s: float) -> bool:
        now = self._clock()
        self._prune(now)
        held = self._claims.get(group_id)
        if held is not None and held[1] > now:  # an expired claim is simply taken over
            return False
        self._claims[group_id] = (token, now + ttl_s)
        return True

    async def renew(self, group_id: str, token: str, ttl_s: float) -> bool:
        held = self._claims.get(group_id)
        if held is None or held[0] != token:
            return False
        self._claims[group_id] = (token, self._clock() + ttl_s)
        return True

    async def release(self, group_id: str, token: str) -> None:
        if self._claims.get(group_id, ("",))[0] == token:
            del self._claims[group_id]

    async def finish(self, group_id: str, result: RoundResult) -> RoundResult | None:
        now = self._clock()
        self._prune(now)
        key = (group_id, result.round)
        if key in self._results:
            return self._results[key][0]
        group = self._open.get(group_id)
        if group is None or group.round != result.round or len(group.members) != len(result.ids):
            return None
        self._results[key] = (result, now + self.limits.result_ttl_s)
        self._latest[group_id] = max(result.round, self._latest.get(group_id, -1))
        answered = self._answered.setdefault(group_id, {})
        for mid in result.ids:
            answered[mid] = max(result.round, answered.get(mid, -1))
        self._drop(group_id)
        if self._on_done is not None:
            self._on_done(group_id, result.round)
        return result

    async def start(self, on_done: OnDone) -> None:
        self._on_done = on_done

    async def counts(self) -> tuple[int, int]:
        self._prune(self._clock())
        return len(self._open), self._held
