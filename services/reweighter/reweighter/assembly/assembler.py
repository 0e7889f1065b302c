"""GroupAssembler: members of a group arrive one at a time (any replica, any order, retried);
once the group is whole it is reweighted once, in member_id order, and every waiter answered.

Why this shape: verl and OpenRLHF hand a reward one sample at a time, but DRA and MMR need the
whole group. The assembler only orchestrates: the member is judged by the engine's
`check_member`, the numbers come from the engine (`areweight`, for incomplete rounds too), and
all state lives behind `AssemblyStore` (in process, or Redis for replicas) as the typed records
of records.py. Waiting is one asyncio future per member plus one watcher task per round on this
replica: tens of thousands of waiters cost no threads.

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
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ..config import Settings
from ..engine.checks import CheckedMember, check_member
from ..errors import (
    Conflict,
    InvalidInput,
    LimitExceeded,
    Overloaded,
    PreconditionFailed,
    StoreUnavailable,
)
from ..limits import Limits
from ..types import AdvantageKind, Group, Method, ReweightRequest
from .records import GroupMeta, MemberRecord, OpenRound, RoundResult, encode
from .store import AssemblyStore
from .types import MemberReason, MemberResult, MemberSubmission

log = logging.getLogger(__name__)

T = TypeVar("T")

_CLAIM_TTL_S = 60.0  # a replica that dies mid-compute blocks its group at most this long
_POLL_MAX_S = 1.0  # polling backoff cap (Redis store, or after a failed compute or claim)
_GRACE_S = 1.0  # after a deadline: the store reads and the close of a short round
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


@dataclass(frozen=True)
class _Member:
    """A checked member in the store's records."""

    checked: CheckedMember
    meta: GroupMeta
    record: MemberRecord

    @property
    def gid(self) -> str:
        return self.checked.group_id

    @property
    def mid(self) -> str:
        return self.checked.member_id


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

    def __init__(self, engine: Any, store: AssemblyStore, settings: Settings) -> None:
        self.engine = engine  # anything with `areweight` (the engine, or the service's drain)
        self.store = store
        self.settings = settings
        self.limits = Limits.from_settings(settings)
        self.stats = AssemblyStats()
        self._replica = uuid.uuid4().hex
        self._claims = itertools.count()  # claim tokens: this replica's id and a serial
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
        m = _Member(checked, *encode(checked))
        size = m.checked.group_size
        loop = asyncio.get_running_loop()
        deadline = loop.time() + m.checked.timeout_s
        if self._waiting >= s.assembly_max_held_members:
            raise Overloaded(f"{self._waiting} members are already waiting here; retry later")
        ttl = m.checked.timeout_s + _GRACE_S + _OPEN_MARGIN_S
        after, answered = -1, None
        while True:  # at most three calls: its own answered round, the latest, the open one
            out = await self._bounded(
                self.store.add(m.gid, m.mid, m.meta, m.record, size, ttl, after), deadline
            )
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

    async def _wait(self, m: _Member, rnd: int, count: int, deadline: float) -> MemberResult:
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
                return await self._at_deadline(m, rnd, watch, deadline + _GRACE_S)
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
        token = f"{self._replica}:{next(self._claims)}"
        if not await self.store.claim(gid, token, _CLAIM_TTL_S):
            return None
        compute = self._compute(gid, rnd, size, token)
        return await asyncio.shield(self._spawn(compute, f"asm-c:{gid}"))

    async def _compute(self, gid: str, rnd: int, size: int, token: str) -> RoundResult | None:
        try:
            group = await self.store.members(gid)
            if group is None or group.round != rnd or len(group.members) < size:
                return None  # expired or closed under us
            ids = sorted(group.members)
            recs = [group.members[i] for i in ids]
            meta = group.meta
            values = [r.value for r in recs]
            rewards = [r.reward for r in recs]
            request = ReweightRequest(
                [
                    Group(rewards=rewards, completions=values, id=gid)
                    if meta.input == "completion"
                    else Group(rewards=rewards, embeddings=values, id=gid)
                ],
                meta.method,
                meta.params,
                meta.advantages,
            )
            out = (await self.engine.areweight(request)).groups[0]
            result = RoundResult(
                round=rnd,
                meta=meta,
                complete=True,
                ids=ids,
                raw=rewards,
                digests=[r.digest for r in recs],
                rewards=out.rewards,
                advantages=out.advantages,
                mean_similarity=out.stats.mean_similarity,
                lambda_=out.stats.lambda_,
            )
            stored = await self.store.finish(gid, result)
            if stored is not None:
                self.stats.groups_computed += 1
            return stored
        finally:
            with contextlib.suppress(Exception):  # after finish: a no-op (the claim is gone)
                await self.store.release(gid, token)

    # -- deadlines -------------------------------------------------------------------------

    async def _at_deadline(
        self, m: _Member, rnd: int, watch: _Watch, answer_by: float
    ) -> MemberResult:
        """The member's timeout_s has passed without a result. A short round is closed now, the
        same answer for every member present; a whole round still computing answers this member
        raw (COMPUTING). Store calls end by `answer_by`; when the store cannot answer, the
        members that waited on this replica stand in for those present."""
        size = m.checked.group_size
        try:
            result, count = await self._bounded(self.store.poll(m.gid, rnd), answer_by)
            if result is None and count < size:
                result = await self._close_short(m, rnd, answer_by)
            if result is None and count < size:  # claimed elsewhere: closing, most likely
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(answer_by):
                        result = await asyncio.shield(watch.done)
            if result is not None:
                return self._answer(result, m)
            group = await self._bounded(self.store.members(m.gid), answer_by)
            present = dict(watch.local)
            if group is not None and group.round == rnd:
                present = {mid: rec.reward for mid, rec in group.members.items()}
            reason = MemberReason.COMPUTING if len(present) >= size else MemberReason.SHORT
            return await self._raw_answer(m, rnd, present, reason)
        except StoreUnavailable as e:
            log.warning("answer for %r from this replica's members: %s", m.gid, e)
            return await self._raw_answer(
                m, rnd, dict(watch.local), MemberReason.STORE_UNAVAILABLE
            )

    async def _close_short(self, m: _Member, rnd: int, by: float) -> RoundResult | None:
        """Close the round as it is (short), unless someone else holds it or it became whole."""
        token = f"{self._replica}:{next(self._claims)}"
        if not await self._bounded(self.store.claim(m.gid, token, _CLAIM_TTL_S), by):
            return None
        try:
            for _ in range(3):  # a member may arrive between the read and the close
                group = await self._bounded(self.store.members(m.gid), by)
                if group is None or group.round != rnd:
                    return None
                if len(group.members) >= m.checked.group_size:
                    return None  # whole after all: the watcher computes it
                result = await self._short_result(m.gid, group)
                stored = await self._bounded(self.store.finish(m.gid, result), by)
                if stored is not None:
                    return stored
            return None
        finally:
            with contextlib.suppress(Exception):
                await self.store.release(m.gid, token)

    async def _short_result(self, gid: str, group: OpenRound) -> RoundResult:
        ids = sorted(group.members)
        raw = [group.members[i].reward for i in ids]
        return RoundResult(
            round=group.round,
            meta=group.meta,
            complete=False,
            ids=ids,
            raw=raw,
            digests=[group.members[i].digest for i in ids],
            rewards=raw,
            advantages=await self._advantages(raw, group.meta.advantages),
            mean_similarity=None,
            lambda_=None,
        )

    async def _raw_answer(
        self, m: _Member, rnd: int, present: dict[str, float], reason: MemberReason
    ) -> MemberResult:
        """This member alone answered raw, over the members `present` (not stored)."""
        present[m.mid] = m.checked.reward  # present even if its round expired meanwhile
        ids = sorted(present)
        adv = await self._advantages([present[i] for i in ids], m.meta.advantages)
        self.stats.timeouts += 1
        return MemberResult(
            group_id=m.gid,
            member_id=m.mid,
            reward=m.checked.reward,
            raw_reward=m.checked.reward,
            advantage=adv[ids.index(m.mid)] if adv is not None else None,
            complete=False,
            reason=reason,
            stats=None,
            members=len(ids),
            round=rnd,
        )

    async def _advantages(self, raw: Sequence[float], kind: str) -> list[float] | None:
        """Advantages of raw rewards, by the engine like every other number: method "none"
        leaves the rewards as they are and ignores similarity, so unit placeholder vectors
        stand in for the texts (nothing is embedded for an incomplete round)."""
        if kind == AdvantageKind.NONE:
            return None
        group = Group(rewards=list(raw), embeddings=np.ones((len(raw), 1), dtype=np.float32))
        out = await self.engine.areweight(ReweightRequest([group], Method.NONE, {}, kind))
        return out.groups[0].advantages

    # -- answers ---------------------------------------------------------------------------

    def _answer(self, result: RoundResult, m: _Member) -> MemberResult:
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

    def _late(self, m: _Member, result: RoundResult, rnd: int) -> None:
        self.stats.size_mismatch["late"] += 1
        state = "complete" if result.complete else "short"
        log.warning(
            "member %r of group %r arrived after round %d was answered (%s, %d of %d members): "
            "it is in round %d. A group_size below the members sent, or members later than "
            "their siblings' timeout_s, do this",
            m.mid, m.gid, result.round, state, len(result.ids), result.meta.group_size, rnd,
        )  # fmt: skip

    def _precondition(self, have: GroupMeta, m: _Member) -> None:
        self.stats.conflicts += 1
        want = m.meta
        for name in ("group_size", "method", "params", "advantages"):
            if getattr(have, name) != getattr(want, name):
                if name == "group_size":
                    self.stats.size_mismatch["declared"] += 1
                raise PreconditionFailed(
                    f"is {getattr(want, name)!r} but group {m.gid!r} has "
                    f"{getattr(have, name)!r}",
                    field=name,
                )
        if have.input != want.input:
            raise PreconditionFailed(
                f"group {m.gid!r} members give {have.input}s", field=want.input
            )
        raise PreconditionFailed(
            f"has dimension {want.dim} but group {m.gid!r} has {have.dim}", field="embedding"
        )

    def _same_payload(self, reward: float, digest: str, m: _Member) -> None:
        for same, name in ((reward == m.record.reward, "reward"),
                           (digest == m.record.digest, m.meta.input)):
            if not same:
                self.stats.conflicts += 1
                raise Conflict(
                    f"member {m.mid!r} of group {m.gid!r} was already sent with a different "
                    f"{name}",
                    field=name,
                )

    async def _bounded(self, awaitable: Awaitable[T], deadline: float) -> T:
        """A store call that cannot outlive the member's deadline (one in memory never waits)."""
        if not self.store.remote:
            return await awaitable
        now = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout_at(max(deadline, now + 0.01)):
                return await awaitable
        except TimeoutError:
            op = getattr(awaitable, "__qualname__", "call")
            raise StoreUnavailable(f"the assembly store did not answer in time ({op})") from None
