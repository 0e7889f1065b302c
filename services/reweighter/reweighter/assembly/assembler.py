"""GroupAssembler: members of a group arrive one at a time (any replica, any order, retried);
once the group is whole it is reweighted once, in member_id order, and every waiter answered.

Why this shape: verl and OpenRLHF hand a reward one sample at a time, but DRA and MMR need the
whole group. The assembler admits a member and hands it to its round: the member is judged by
the engine's `check_member`, encoded into the records the store's rules read (machine.encode),
held to this replica's bounds (members waiting, each tenant's share of them and of open
groups), and given to `round.join`. From there the member is its round's (round.py): the
store's outcomes, its wait, its answer, its deadline. All state lives behind `AssemblyStore`
(in process, or Redis for replicas) as the typed records of records.py, changed by the
transitions of machine.py; every number comes from the engine. Waiting is one asyncio future
per round plus one watcher task per round on this replica: tens of thousands of waiters cost
no threads. The assembler takes no pace turn: the transports take one at admission, the round
one at the answer (round.py says why).

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
from .machine import encode
from .pace import Pace
from .round import CLAIM_TTL_S, AssemblyStats, Context, join
from .store import AssemblyStore, stop_if_cancelled

log = logging.getLogger(__name__)

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
        self._ctx.member_wait_s = settings.assembly_timeout_s
        self._fill: asyncio.Task[None] | None = None
        self._started = False

    @property
    def waiting(self) -> int:
        """Members waiting on this replica now."""
        return self._ctx.waiting

    def waiting_of(self, tenant: str) -> int:
        """Members of `tenant` waiting on this replica now."""
        return self._ctx.waiting_by.get(tenant, 0)

    @property
    def pace(self) -> Pace:
        """This replica's members' turns through the event loop (pace.py): each transport
        takes one when it admits a member's request (before parsing it), the member's round
        one before its answer."""
        return self._ctx.pace

    @property
    def open_groups(self) -> int:
        """Rounds with a member waiting on this replica now."""
        return len(self._ctx.rounds)

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self.store.start(self._on_done)
            self._fill = self._ctx.spawn(self._read_fill(), "assembly-fill")

    async def aclose(self) -> None:
        """Answer every waiter here with a retryable 503 (with Redis another replica can still
        complete its group), stop the watchers, close the store."""
        for rnd in list(self._ctx.rounds.values()):
            rnd.close(StoreUnavailable("the service is stopping; send the member again"))
        for task in list(self._ctx.tasks):
            task.cancel()
        await self.store.aclose()

    def _on_done(self, group_id: str, round: int) -> None:
        rnd = self._ctx.rounds.get((group_id, round))
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
        """Admit the member and answer it from its round (round.join); see MemberResult for
        what comes back."""
        await self.start()
        s = self.settings
        checked = check_member(
            sub,
            self.limits,
            default_timeout_s=s.assembly_timeout_s,
            max_timeout_s=s.assembly_max_timeout_s,
        )
        m = encode(checked)
        del checked  # the member waits as its records (machine.Member), not its parsed request
        reuse_ids = sub.reuse_ids
        if self.waiting >= s.assembly_max_held_members:
            raise Overloaded(f"{self.waiting} members are already waiting here; retry later")
        share = tenant_share(s.assembly_max_held_members)
        if share is not None and self.waiting_of(m.tenant) >= share:
            raise Overloaded(
                f"tenant {m.tenant!r} has {share} members waiting here, its share of "
                f"assembly_max_held_members; retry later",
                field="assembly_max_held_members",
            )
        groups = tenant_share(s.assembly_max_open_groups)
        if (
            groups is not None
            and self._ctx.open_by.get(m.tenant, 0) >= groups
            and not any(k == m.key for k, _ in self._ctx.rounds)
        ):
            raise Overloaded(
                f"tenant {m.tenant!r} has {groups} groups open here, its share of "
                f"assembly_max_open_groups; retry later",
                field="assembly_max_open_groups",
            )
        try:
            return await join(self._ctx, m, reuse_ids)
        except (Conflict, PreconditionFailed) as e:  # round.conflict's 409s, and Full's
            self.stats.refused(e)
            raise
