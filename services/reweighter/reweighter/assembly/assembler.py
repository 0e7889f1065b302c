"""GroupAssembler: members of a group arrive one at a time (any replica, any order, retried);
once the group is whole it is reweighted once, in member_id order, and every waiter answered.

Why this shape: verl and OpenRLHF hand a reward one sample at a time, but DRA and MMR need the
whole group. The assembler only orchestrates: the member is judged by the engine's
`check_member`, the numbers come from the engine (`areweight`, for incomplete rounds too), and
all state lives behind `AssemblyStore` (in process, or Redis for replicas) as the typed records
of records.py; what a member gets at its deadline is deadlines.py's. Waiting is one asyncio
future per member plus one watcher task per round on this replica: tens of thousands of waiters
cost no threads.

Rounds: a member never joins a round that has been answered. A round ends when it is whole
(reweighted) or at the first deadline of its members (closed short: every member present gets
the same raw answer); the next member for that group id that is not a retry opens round + 1,
logged at WARNING and counted (`size_mismatch{kind="late"}`), since with a right group_size and
timeout it does not happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..config import Settings
from ..engine.checks import check_member
from ..engine.surface import EngineSurface
from ..errors import (
    Conflict,
    InvalidInput,
    LimitExceeded,
    Overloaded,
    PreconditionFailed,
    StoreUnavailable,
)
from ..limits import Limits
from ..types import Group, ReweightRequest
from .deadlines import CLAIM_TTL_S, GRACE_S, Deadlines, bounded
from .records import GroupMeta, Member, RoundResult, encode
from .store import AssemblyStore
from .types import MemberResult, MemberSubmission

log = logging.getLogger(__name__)

T = TypeVar("T")

_POLL_MAX_S = 1.0  # polling backoff cap (Redis store, or after a failed compute or claim)
_OPEN_MARGIN_S = 5.0  # an open round outlives its latest deadline by this (no waiter left)
_FILL_PERIOD_S = 1.0  # how often the store's fill is read for /metrics


@dataclass
class AssemblyStats:
    """Plain counters and the store's fill; the transports export them to /metrics."""

    members: int = 0  # submissions accepted (retries included)
    timeouts: int = 0  # answers with complete=False (any reason)
    groups_computed: int = 0  # groups this replica reweighted
    conflicts: int = 0  # Conflict and PreconditionFailed answers
    size_mismatch: dict[str, int] = field(
        default_factory=lambda: {"declared": 0, "full": 0, "late": 0}
    )
    """declared: a group_size other than the group's (409); full: a new member for a whole
    group (409); late: a member after its round was answered, opening the next (WARNING)."""
    store_groups: int = 0  # open groups in the whole store (all replicas with Redis)
    store_members: int = 0  # members held in them


class _Watch:
    """This replica's waiters of one round, and the task that watches the store for them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.event = asyncio.Event()
        self.done: asyncio.Future[RoundResult] = asyncio.get_running_loop().create_future()
        self.waiters = 0
        self.local: dict[str, float] = {}  # member -> raw reward, of those that waited here
        self.task: asyncio.Task[None] | None = None


class GroupAssembler:
    """The public API: `submit`, `start`, `aclose`; `stats`, `waiting`, `open_groups`."""

    def __init__(self, engine: EngineSurface, store: AssemblyStore, settings: Settings) -> None:
        self.engine = engine  # the engine, or the service's drain of it
        self.store = store
        self.settings = settings
        self.limits = Limits.from_settings(settings)
        self.stats = AssemblyStats()
        self._replica = uuid.uuid4().hex
        self._claims = itertools.count()  # claim tokens: this replica's id and a serial
        self._deadlines = Deadlines(store, engine, self._token, self._raw_answered)
        self._watches: dict[tuple[str, int], _Watch] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._waiting = 0
        self._started = False

    @property
    def waiting(self) -> int:
        """Members waiting on this replica now."""
        return self._waiting

    @property
    def open_groups(self) -> int:
        """Rounds with a member waiting on this replica now."""
        return len(self._watches)

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self.store.start(self._on_done)
            self._spawn(self._read_fill(), "assembly-fill")

    async def aclose(self) -> None:
        """Answer every waiter here with a retryable 503 (with Redis another replica can still
        complete its group), stop the watchers, close the store."""
        for watch in list(self._watches.values()):
            if not watch.done.done():
                watch.done.set_exception(
                    StoreUnavailable("the service is stopping; send the member again")
                )
                watch.done.exception()  # retrieved: no "never retrieved" warning
            if watch.task is not None:
                watch.task.cancel()
        for task in list(self._tasks):
            task.cancel()
        await self.store.aclose()

    def _token(self) -> str:
        return f"{self._replica}:{next(self._claims)}"

    def _raw_answered(self) -> None:
        self.stats.timeouts += 1

    def _spawn(self, coro: Awaitable[T], name: str) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _on_done(self, group_id: str, round: int) -> None:
        watch = self._watches.get((group_id, round))
        if watch is not None:
            watch.event.set()

    async def _read_fill(self) -> None:
        while True:
            try:
                self.stats.store_groups, self.stats.store_members = await asyncio.wait_for(
                    self.store.counts(), 5.0
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the last reading stays; waiters report the outage
                log.debug("assembly store fill not read: %r", e)
            await asyncio.sleep(_FILL_PERIOD_S)

    # -- the call --------------------------------------------------------------------------

    async def submit(self, sub: MemberSubmission) -> MemberResult:
        """Add the member and wait for its round; see MemberResult for what comes back."""
        await self.start()
        s = self.settings
        checked = check_member(
            sub,
            self.limits,
            default_timeout_s=s.assembly_timeout_s,
            max_timeout_s=s.assembly_max_timeout_s,
        )
        m = encode(checked)
        size = m.checked.group_size
        loop = asyncio.get_running_loop()
        deadline = loop.time() + m.checked.timeout_s
        if self._waiting >= s.assembly_max_held_members:
            raise Overloaded(f"{self._waiting} members are already waiting here; retry later")
        ttl = m.checked.timeout_s + GRACE_S + _OPEN_MARGIN_S
        after, answered = -1, None
        while True:  # at most three calls: its own answered round, the latest, the open one
            add = self.store.add(m.gid, m.mid, m.meta, m.record, size, ttl, after)
            out = await bounded(self.store, add, deadline)
            if out.kind != "done":
                break
            assert out.result is not None
            if out.result.position(m.mid, m.meta, m.record) is not None:
                return self._answer(out.result, m)
            after, answered = out.round, out.result
        if out.kind == "added" and answered is not None:
            self._late(m, answered, out.round)
        if out.kind == "precondition":
            assert out.meta is not None
            self._precondition(out.meta, m)
        if out.kind == "full":
            self.stats.conflicts += 1
            self.stats.size_mismatch["full"] += 1
            raise PreconditionFailed(
                f"group {m.gid!r} already has its {out.count} members, none of them "
                f"{m.mid!r}: more members were sent than its group_size {size}",
                field="member_id",
            )
        if out.kind == "overloaded":
            raise Overloaded(f"too many {out.bound} held for assembly; retry later")
        if out.kind == "exists":
            assert out.record is not None
            self._same_payload(out.record.reward, out.record.digest, m)
        self.stats.members += 1
        return await self._wait(m, out.round, out.count, deadline)

    async def _wait(self, m: Member, rnd: int, count: int, deadline: float) -> MemberResult:
        key = (m.gid, rnd)
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches[key] = _Watch(m.checked.group_size)
            watch.task = asyncio.create_task(self._watch(m.gid, rnd, watch), name=f"asm:{m.gid}")
        watch.waiters += 1
        watch.local[m.mid] = m.checked.reward
        self._waiting += 1
        if count >= watch.size:
            watch.event.set()
        try:
            try:  # asyncio.timeout, not wait_for: no task per waiter (3.11)
                async with asyncio.timeout_at(deadline):
                    result = await asyncio.shield(watch.done)
            except TimeoutError:
                return await self._deadlines.answer(
                    m, rnd, watch.done, watch.local, deadline + GRACE_S,
                    lambda result: self._answer(result, m),
                )  # fmt: skip
            return self._answer(result, m)
        finally:
            watch.waiters -= 1
            self._waiting -= 1
            if watch.waiters == 0 and self._watches.get(key) is watch:
                del self._watches[key]
                if watch.task is not None:
                    watch.task.cancel()

    async def _watch(self, gid: str, rnd: int, watch: _Watch) -> None:
        """Until the round's result exists: look, compute it if it is whole and nobody else is,
        sleep until woken (this replica's compute, pub/sub) or the next poll."""
        delay, retry = 0.05, False
        while True:
            watch.event.clear()
            try:
                async with asyncio.timeout(5.0):
                    result, count = await self.store.poll(gid, rnd)
                retry = False
                if result is None and count >= watch.size:
                    result = await self._compute_once(gid, rnd, watch.size)
                    retry = result is None  # claimed elsewhere: it may be released unfinished
                if result is not None:
                    if not watch.done.done():
                        watch.done.set_result(result)
                    return
            except asyncio.CancelledError:
                raise
            except (InvalidInput, LimitExceeded) as e:  # the whole group breaks a rule
                if not watch.done.done():
                    watch.done.set_exception(
                        type(e)(f"group {gid!r} cannot be reweighted: {e.message}")
                    )
                return
            except Exception as e:  # Redis away, engine overloaded: try again until deadlines
                (log.debug if retry else log.warning)("assembly of %r: %r; retrying", gid, e)
                retry = True
            wait = delay if (self.store.polling or retry) else None
            try:
                await asyncio.wait_for(watch.event.wait(), wait)
            except TimeoutError:
                delay = min(delay * 2, _POLL_MAX_S)

    async def _compute_once(self, gid: str, rnd: int, size: int) -> RoundResult | None:
        """Reweight the round unless another replica has claimed it; survives our waiters
        leaving (shielded), so a claimed round is always finished or released."""
        token = self._token()
        if not await self.store.claim(gid, token, CLAIM_TTL_S):
            return None
        compute = self._compute(gid, rnd, size, token)
        return await asyncio.shield(self._spawn(compute, f"asm-c:{gid}"))

    async def _compute(self, gid: str, rnd: int, size: int, token: str) -> RoundResult | None:
        try:
            group = await self.store.members(gid)
            if group is None or group.round != rnd or len(group.members) < size:
                return None  # expired or closed under us
            _, records = group.ordered()
            meta = group.meta
            values, rewards = [r.value for r in records], [r.reward for r in records]
            one = (
                Group(rewards=rewards, completions=values, id=gid)
                if meta.input == "completion"
                else Group(rewards=rewards, embeddings=values, id=gid)
            )
            request = ReweightRequest([one], meta.method, meta.params, meta.advantages)
            out = (await self.engine.areweight(request)).groups[0]
            result = group.result(out.rewards, out.advantages, out.stats)
            stored = await self.store.finish(gid, result)
            if stored is not None:
                self.stats.groups_computed += 1
            return stored
        finally:
            with contextlib.suppress(Exception):  # after finish: a no-op (the claim is gone)
                await self.store.release(gid, token)

    # -- answers ---------------------------------------------------------------------------

    def _answer(self, result: RoundResult, m: Member) -> MemberResult:
        if result.meta != m.meta:
            self._precondition(result.meta, m)
        if m.mid not in result.ids:  # finish checks the count: only a store that lost state
            raise StoreUnavailable(
                f"round {result.round} of group {m.gid!r} was answered without member "
                f"{m.mid!r}; send it again"
            )
        i = result.ids.index(m.mid)
        self._same_payload(result.raw[i], result.digests[i], m)
        if not result.complete:
            self.stats.timeouts += 1
        return result.answer(m.gid, i)

    def _late(self, m: Member, result: RoundResult, rnd: int) -> None:
        self.stats.size_mismatch["late"] += 1
        state = "complete" if result.complete else "short"
        log.warning(
            "member %r of group %r arrived after round %d was answered (%s, %d of %d members): "
            "it is in round %d. A group_size below the members sent, or members later than "
            "their siblings' timeout_s, do this",
            m.mid, m.gid, result.round, state, len(result.ids), result.meta.group_size, rnd,
        )  # fmt: skip

    def _precondition(self, have: GroupMeta, m: Member) -> None:
        self.stats.conflicts += 1
        want = m.meta
        for name in ("group_size", "method", "params", "advantages"):
            if getattr(have, name) != getattr(want, name):
                if name == "group_size":
                    self.stats.size_mismatch["declared"] += 1
                raise PreconditionFailed(
                    f"is {getattr(want, name)!r} but group {m.gid!r} has {getattr(have, name)!r}",
                    field=name,
                )
        if have.input != want.input:
            raise PreconditionFailed(
                f"group {m.gid!r} members give {have.input}s", field=want.input
            )
        raise PreconditionFailed(
            f"has dimension {want.dim} but group {m.gid!r} has {have.dim}", field="embedding"
        )

    def _same_payload(self, reward: float, digest: str, m: Member) -> None:
        for same, name in (
            (reward == m.record.reward, "reward"),
            (digest == m.record.digest, m.meta.input),
        ):
            if not same:
                self.stats.conflicts += 1
                raise Conflict(
                    f"member {m.mid!r} of group {m.gid!r} was already sent with a different {name}",
                    field=name,
                )
