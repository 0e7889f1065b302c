"""GroupAssembler: members of a group arrive one at a time (any replica, any order, retried);
once the group is whole it is reweighted once, in member_id order, and every waiter answered.

Why this shape: verl and OpenRLHF hand a reward one sample at a time, but DRA and MMR need the
whole group. The assembler only orchestrates: the member is judged by the engine's
`check_member`, the numbers come from the engine (`areweight`, for incomplete rounds too), and
all state lives behind `AssemblyStore` (in process, or Redis for replicas) as the typed records
of records.py, changed by the transitions of machine.py, whose typed outcomes are matched here
in one place. Each round waited on here is a `Round` (round.py): its waiters, its watch, its
deadline, its answer. Waiting is one asyncio future per round plus one watcher task per round on
this replica: tens of thousands of waiters cost no threads.

Rounds: a member never joins a round that has been answered. A round ends when it is whole
(reweighted) or at the first deadline of its members (closed short: every member present gets
the same raw answer); the next *new* member id for that group id opens round + 1, logged at
WARNING and counted (`size_mismatch{kind="late"}`), since with a right group_size and timeout it
does not happen. A member id the group has answered, sent with another payload or settings, is a
409 as it is while its round is open (a non-deterministic reward, an id collision), unless the
request says `reuse_ids` (then it is a new member of the next round).
"""

from __future__ import annotations

import asyncio
import logging

from ..config import Settings
from ..engine.checks import check_member
from ..engine.surface import EngineSurface
from ..errors import Conflict, Overloaded, PreconditionFailed, StoreUnavailable
from ..limits import Limits
from ..tenancy import tenant_share
from ..types import MemberResult, MemberSubmission
from .machine import (
    Added,
    Answered,
    Bounded,
    Exists,
    Full,
    Member,
    Mismatch,
    answered,
    conflict,
    encode,
)
from .pace import Pace
from .records import RoundResult
from .round import CLAIM_TTL_S, GRACE_S, AssemblyStats, Context, Round, bounded
from .store import AssemblyStore, stop_if_cancelled

log = logging.getLogger(__name__)

_OPEN_MARGIN_S = 5.0  # an open round outlives its latest deadline by this (no waiter left)
_FILL_PERIOD_S = 1.0  # how often the store's fill is read for /metrics


class GroupAssembler:
    """The public API: `submit`, `start`, `aclose`; `stats`, `waiting`, `open_groups`."""

    def __init__(
        self,
        engine: EngineSurface,
        store: AssemblyStore,
        settings: Settings,
        *,
        claim_ttl_s: float = CLAIM_TTL_S,
    ) -> None:
        self.engine = engine  # the engine, or the service's drain of it
        self.store = store
        self.settings = settings
        self.limits = Limits.from_settings(settings)
        self.stats = AssemblyStats()
        self._ctx = Context(store, engine, self.stats, claim_ttl_s)
        self._rounds: dict[tuple[str, int], Round] = {}
        self._fill: asyncio.Task[None] | None = None
        self._waiting = 0
        self._waiting_by: dict[str, int] = {}  # tenant -> members waiting here
        self._open_by: dict[str, int] = {}  # tenant -> rounds with a member waiting here
        self._started = False

    @property
    def waiting(self) -> int:
        """Members waiting on this replica now."""
        return self._waiting

    def waiting_of(self, tenant: str) -> int:
        """Members of `tenant` waiting on this replica now."""
        return self._waiting_by.get(tenant, 0)

    @property
    def pace(self) -> Pace:
        """This replica's members' turns through the event loop (pace.py); the HTTP layer
        takes one before parsing a member's request."""
        return self._ctx.pace

    @property
    def open_groups(self) -> int:
        """Rounds with a member waiting on this replica now."""
        return len(self._rounds)

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self.store.start(self._on_done)
            self._fill = self._ctx.spawn(self._read_fill(), "assembly-fill")

    async def aclose(self) -> None:
        """Answer every waiter here with a retryable 503 (with Redis another replica can still
        complete its group), stop the watchers, close the store."""
        for rnd in list(self._rounds.values()):
            rnd.close(StoreUnavailable("the service is stopping; send the member again"))
        for task in list(self._ctx.tasks):
            task.cancel()
        await self.store.aclose()

    def _on_done(self, group_id: str, round: int) -> None:
        rnd = self._rounds.get((group_id, round))
        if rnd is not None:
            rnd.wake()

    async def _read_fill(self) -> None:
        while True:
            try:
                self.stats.store_groups, self.stats.store_members = await asyncio.wait_for(
                    self.store.counts(), 5.0
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the last reading stays; waiters report the outage
                stop_if_cancelled(e)
                log.debug("assembly store fill not read: %r", e)
            await asyncio.sleep(_FILL_PERIOD_S)

    # -- the call --------------------------------------------------------------------------

    async def submit(self, sub: MemberSubmission) -> MemberResult:
        """Add the member and wait for its round; see MemberResult for what comes back."""
        await self.start()
        await self._ctx.pace.turn()  # a burst of members goes through in slices (pace.py)
        s = self.settings
        checked = check_member(
            sub,
            self.limits,
            default_timeout_s=s.assembly_timeout_s,
            max_timeout_s=s.assembly_max_timeout_s,
        )
        m = encode(checked)
        if self._waiting >= s.assembly_max_held_members:
            raise Overloaded(f"{self._waiting} members are already waiting here; retry later")
        share = tenant_share(s.assembly_max_held_members)
        if share is not None and self.waiting_of(m.tenant) >= share:
            raise Overloaded(
                f"tenant {m.tenant!r} has {share} members waiting here, its share of "
                f"assembly_max_held_members; retry later",
                field="assembly_max_held_members",
            )
        groups = tenant_share(s.assembly_max_open_groups)
        if groups is not None and self._open_by.get(m.tenant, 0) >= groups and not any(
            k == m.key for k, _ in self._rounds
        ):
            raise Overloaded(
                f"tenant {m.tenant!r} has {groups} groups open here, its share of "
                f"assembly_max_open_groups; retry later",
                field="assembly_max_open_groups",
            )
        try:
            return await self._add(m, sub.reuse_ids)
        except (Conflict, PreconditionFailed) as e:  # machine.conflict's 409s, and Full's
            self.stats.refused(e)
            raise

    async def _add(self, m: Member, reuse_ids: bool) -> MemberResult:
        """Add m to its group's round and wait for its answer (the store's outcomes, matched
        in this one place)."""
        size = m.checked.group_size
        deadline = asyncio.get_running_loop().time() + m.checked.timeout_s
        ttl = m.checked.timeout_s + GRACE_S + _OPEN_MARGIN_S
        after, seen = -1, None
        while True:  # at most three calls: its own answered round, the latest, the open one
            add = self.store.add(m.key, m.mid, m.meta, m.record, size, ttl, after)
            match await bounded(self.store, add, deadline):
                case Answered(round=rnd, result=result):
                    if answer := answered(result, m, reuse_ids):  # a retry, or a 409
                        self.stats.timeouts += 0 if answer.complete else 1
                        return answer
                    after, seen = rnd, result
                case Mismatch(meta=meta):
                    raise conflict(meta, None, m) or AssertionError("a mismatch that fits")
                case Full(count=count):
                    self.stats.size_mismatch["full"] += 1
                    raise PreconditionFailed(
                        f"group {m.gid!r} already has its {count} members, none of them "
                        f"{m.mid!r}: more members were sent than its group_size {size}",
                        field="member_id",
                    )
                case Bounded(bound=bound):
                    raise Overloaded(f"too many {bound} held for assembly; retry later")
                case Exists(round=rnd, count=count, record=record):
                    if error := conflict(m.meta, (record.reward, record.digests), m):
                        raise error
                    return await self._wait(m, rnd, count, deadline)
                case Added(round=rnd, count=count):
                    if seen is not None:
                        self._late(m, seen, rnd)
                    return await self._wait(m, rnd, count, deadline)

    async def _wait(self, m: Member, rnd: int, count: int, deadline: float) -> MemberResult:
        self.stats.members += 1
        key = (m.key, rnd)
        watch = self._rounds.get(key)
        if watch is None:
            watch = self._rounds[key] = Round(self._ctx, m.key, rnd, m.checked.group_size)
            self._open_by[m.tenant] = self._open_by.get(m.tenant, 0) + 1
        self._waiting += 1
        self._waiting_by[m.tenant] = self._waiting_by.get(m.tenant, 0) + 1
        try:
            return await watch.wait(m, count, deadline)
        finally:
            self._waiting -= 1
            left = self._waiting_by[m.tenant] - 1
            if left:
                self._waiting_by[m.tenant] = left
            else:
                del self._waiting_by[m.tenant]
            if watch.waiters == 0 and self._rounds.get(key) is watch:
                del self._rounds[key]
                watch.task.cancel()
                if self._open_by.get(m.tenant, 0) > 1:
                    self._open_by[m.tenant] -= 1
                else:
                    self._open_by.pop(m.tenant, None)

    def _late(self, m: Member, result: RoundResult, rnd: int) -> None:
        self.stats.size_mismatch["late"] += 1
        state = "complete" if result.complete else "short"
        log.warning(
            "member %r of group %r arrived after round %d was answered (%s, %d of %d members): "
            "it is in round %d. A group_size below the members sent, or members later than "
            "their siblings' timeout_s, do this",
            m.mid, m.gid, result.round, state, len(result.ids), result.meta.group_size, rnd,
        )  # fmt: skip

