"""One round of one group, as one replica sees it: the round owns its members' outcomes.

Why one owner: once the assembler has admitted a member (the engine's check, its records, this
replica's bounds), everything that happens to it is its round's. `join` adds it by the store's
rules (machine.RULES) and matches their typed outcomes in this one place: a retry is answered
off the round it was in, a member that does not fit what its round holds is a 409 naming the
field (`conflict`), a bound a 429, and a member that joined waits in its `Round`. The `Round`
holds the members waiting here (one future for all), watches the store until the round has a
result (computing it, under a claim renewed while the compute runs, when it is whole and
nobody else is), and reads each member's answer off that result (`answer_of`); at a member's
deadline it answers it from the round closed short (stored, the same answer for every member
present), or this member alone raw (COMPUTING, STORE_UNAVAILABLE). It needs only `Context`
(the store, the engine, the counters, this replica's rounds, claim tokens), never the assembler.

Every number comes from the engine: the reweighted ones from `areweight`, the advantages of raw
rewards from the engine's one estimator path (engine/compute.py `raw_advantages`, the code
/v1/reweight runs after its method), so nothing is embedded for a round that closed short.

Pace (pace.py): a member's answer takes one turn, in `Round.wait`; its arrival took one at its
transport's admission (the HTTP edge for /v1/groups/, api/grpc's servicer), and the assembler
takes none. The answer's turn guards what no admission can: a round's result, or a deadline,
wakes every member waiting on it in one loop iteration (one engine batch finishes many groups;
members admitted together reach their deadlines together), and each one's step, its answer and
its transport's response, would run in that iteration (tests/assembly/test_pace.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..engine.compute import raw_advantages
from ..engine.surface import EngineSurface
from ..errors import (
    Conflict,
    InvalidInput,
    LimitExceeded,
    Overloaded,
    PreconditionFailed,
    StoreUnavailable,
)
from ..types import MemberReason, MemberResult
from .machine import Added, Answered, Bounded, Exists, Full, Member, Mismatch
from .pace import Pace
from .records import PAYLOAD, SHARED, GroupMeta, OpenRound, RoundResult
from .store import AssemblyStore, stop_if_cancelled

log = logging.getLogger(__name__)

T = TypeVar("T")

CLAIM_TTL_S = 60.0
"""A claim to compute or close a round lasts this long and is renewed every third of it while
its compute runs: a replica that dies mid-compute blocks its group at most this long."""
GRACE_S = 5.0
"""After a member's deadline: the store reads and the close of a short round (poll, claim,
members, finish, release). Sized for a loaded machine, not for Redis's sub-millisecond replies:
in the 30-minute soak (bench/bench_soak.py) on a shared 2-core machine, 1 s ran out for a few
abandoned members in minutes whose p99 was 3.6-13.9 s, and they were answered
`store_unavailable` with Redis up. 5 s holds two replies at the Redis client's whole socket
timeout (2 s) and the rest; the clients wait `timeout_s` + 30 s (client/_base.py
MEMBER_MARGIN_S), so no caller gives up first. A Redis that refuses answers at once."""
_POLL_MAX_S = 1.0  # polling backoff cap (Redis store, or after a failed compute or claim)
_OPEN_MARGIN_S = 5.0  # an open round outlives its latest deadline by this (no waiter left)


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
    raw_groups: dict[str, int] = field(default_factory=lambda: {"short": 0, "computing": 0})
    """Rounds answered with raw rewards because their members' wait (timeout_s, by default
    assembly_timeout_s) ran out, counted once per round by each replica that had a member of it
    waiting: short (not every member came), computing (whole, not reweighted in time)."""

    def refused(self, error: Conflict | PreconditionFailed) -> None:
        """Count a 409 (a group_size that is not the group's also as `declared`)."""
        self.conflicts += 1
        if isinstance(error, PreconditionFailed) and error.field == "group_size":
            self.size_mismatch["declared"] += 1


@dataclass
class Context:
    """What every round of a replica shares, and the rounds themselves (those with a member
    waiting here, and the counts the assembler's bounds read)."""

    store: AssemblyStore
    engine: EngineSurface  # the engine, or the service's drain of it
    stats: AssemblyStats
    claim_ttl_s: float = CLAIM_TTL_S
    pace: Pace = field(default_factory=Pace)
    """Members' steps per loop iteration (pace.py): a burst cannot hold the loop."""
    replica: str = field(default_factory=lambda: uuid.uuid4().hex)
    _serial: Any = field(default_factory=itertools.count)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    """Computes that outlive their waiters (shielded), cancelled on close."""
    rounds: dict[tuple[str, int], Round] = field(default_factory=dict)
    """(group key, round) -> the round, while a member waits in it here."""
    waiting: int = 0
    """Members waiting here."""
    waiting_by: dict[str, int] = field(default_factory=dict)  # tenant -> members waiting here
    open_by: dict[str, int] = field(default_factory=dict)  # tenant -> its rounds in `rounds`
    member_wait_s: float = 300.0
    """The service's default member wait (Settings.assembly_timeout_s), named in the warning."""
    raw_logged: dict[tuple[str, int | None], float] = field(default_factory=dict)
    """(tenant, step) -> when a raw round of it was last logged (RAW_LOG_KEYS at most)."""

    def token(self) -> str:
        """A claim token: this replica's id and a serial."""
        return f"{self.replica}:{next(self._serial)}"

    def spawn(self, coro: Awaitable[T], name: str) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task


async def bounded(store: AssemblyStore, awaitable: Awaitable[T], deadline: float) -> T:
    """A store call that cannot outlive the member's deadline (one in memory never waits)."""
    if not store.remote:
        return await awaitable
    now = asyncio.get_running_loop().time()
    try:
        async with asyncio.timeout_at(max(deadline, now + 0.01)):
            return await awaitable
    except TimeoutError:
        op = getattr(awaitable, "__qualname__", "call")
        raise StoreUnavailable(f"the assembly store did not answer in time ({op})") from None


async def join(ctx: Context, m: Member, reuse_ids: bool) -> MemberResult:
    """Add m to its group's round and answer it from that round: the store's outcomes
    (machine.AddOutcome), matched in this one place."""
    store, size = ctx.store, m.group_size
    deadline = asyncio.get_running_loop().time() + m.timeout_s
    ttl = m.timeout_s + GRACE_S + _OPEN_MARGIN_S
    after, seen = -1, None
    while True:  # at most three calls: its own answered round, the latest, the open one
        add = store.add(m.key, m.mid, m.meta, m.record, size, ttl, after)
        match await bounded(store, add, deadline):
            case Answered(round=rnd, result=result):
                if answer := answered(result, m, reuse_ids):  # a retry, or a 409
                    ctx.stats.timeouts += 0 if answer.complete else 1
                    return answer
                after, seen = rnd, result
            case Mismatch(meta=meta):
                raise conflict(meta, None, m) or AssertionError("a mismatch that fits")
            case Full(count=count):
                ctx.stats.size_mismatch["full"] += 1
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
                return await Round.of(ctx, m, rnd).wait(m, count, deadline)
            case Added(round=rnd, count=count):
                if seen is not None:
                    _late(ctx, m, seen, rnd)
                return await Round.of(ctx, m, rnd).wait(m, count, deadline)


RAW_LOG_KEYS = 1024
"""(tenant, step) pairs whose raw rounds the warning remembers having logged."""
RAW_LOG_PERIOD_S = 60.0
"""Members that send no step: at most one raw-round warning per tenant this often."""


def raw_round(ctx: Context, m: Member, answer: MemberResult) -> None:
    """A round answered raw because its members' wait ran out: counted (`raw_groups`), and
    logged at WARNING once per (tenant, step) (once a minute per tenant without a step), naming
    the setting that decides the wait. Called once per round and replica."""
    reason = "computing" if answer.reason is MemberReason.COMPUTING else "short"
    ctx.stats.raw_groups[reason] += 1
    step = m.meta.step
    key, now = (m.tenant, step), time.monotonic()
    last = ctx.raw_logged.get(key)
    if last is not None and (step is not None or now - last < RAW_LOG_PERIOD_S):
        return
    ctx.raw_logged.pop(key, None)
    ctx.raw_logged[key] = now
    while len(ctx.raw_logged) > RAW_LOG_KEYS:  # oldest first: dicts keep insertion order
        del ctx.raw_logged[next(iter(ctx.raw_logged))]
    which = f"step {step}" if step is not None else "a step (the members send no step)"
    if reason == "computing":
        why = (
            f"its {answer.members} members all came but it was not reweighted within their "
            f"wait of {m.timeout_s:g} s: the service is slower than the wait at this size "
            "(docs/cost.md)"
        )
    else:
        why = (
            f"only {answer.members} of its {m.group_size} members came within their wait of "
            f"{m.timeout_s:g} s (a slow sibling, or a group_size above the samples per prompt)"
        )
    log.warning(
        "%s of tenant %r: group %r was answered with raw rewards, not reweighted (reason %s): "
        "%s. A member waits its timeout_s, by default the setting assembly_timeout_s "
        "(REWEIGHTER_ASSEMBLY_TIMEOUT_S, --assembly-timeout-s; now %g s; the OpenRLHF route's "
        "is openrlhf_timeout_s): raise it to at least a step's reweighting time. This step's "
        "other raw groups are counted in reweighter_assembly_raw_groups_total{reason}, not "
        "logged",
        which, m.tenant, m.gid, reason, why, ctx.member_wait_s,
    )  # fmt: skip


def _late(ctx: Context, m: Member, result: RoundResult, rnd: int) -> None:
    ctx.stats.size_mismatch["late"] += 1
    state = "complete" if result.complete else "short"
    log.warning(
        "member %r of group %r arrived after round %d was answered (%s, %d of %d members): "
        "it is in round %d. A group_size below the members sent, or members later than "
        "their siblings' timeout_s, do this",
        m.mid, m.gid, result.round, state, len(result.ids), result.meta.group_size, rnd,
    )  # fmt: skip


class Round:
    """Round `rnd` of group `gid` (of `size` members) on this replica.

    What it holds is per round, not per member (issue 51: a flood of one-member groups makes
    every round's bytes a member's): slots, and the watcher's wake is a flag and a future made
    only while it sleeps (an asyncio.Event carries a deque of its own); a member waits on a
    future of its own that the round's `done` sets (`_settled`), not a shield of `done`."""

    __slots__ = ("_sleep", "_waits", "_woken", "ctx", "done", "gid", "local", "raw", "rnd",
                 "size", "task", "waiters")  # fmt: skip

    def __init__(self, ctx: Context, gid: str, rnd: int, size: int) -> None:
        self.ctx, self.gid, self.rnd, self.size = ctx, gid, rnd, size
        self._woken = False  # woken since the watcher last looked
        self._sleep: asyncio.Future[None] | None = None  # the watcher's, while it sleeps
        self.done: asyncio.Future[RoundResult] = asyncio.get_running_loop().create_future()
        self.done.add_done_callback(self._settled)
        self._waits: list[asyncio.Future[RoundResult]] = []  # one per member waiting here
        self.waiters = 0
        self.local: dict[str, float] = {}  # member -> raw reward, of those that waited here
        self.raw = False  # answered raw at a member's deadline here (counted, maybe logged)
        self.task = asyncio.create_task(self._watch(), name=f"asm:{gid}")

    @classmethod
    def of(cls, ctx: Context, m: Member, rnd: int) -> Round:
        """Round `rnd` of m's group here: the one its members wait in, or a new one."""
        key = (m.key, rnd)
        found = ctx.rounds.get(key)
        if found is None:
            found = ctx.rounds[key] = cls(ctx, m.key, rnd, m.group_size)
            ctx.open_by[m.tenant] = ctx.open_by.get(m.tenant, 0) + 1
        return found

    def _settled(self, done: asyncio.Future[RoundResult]) -> None:
        """The round's result, or its error, reaches every member waiting on it."""
        error = None if done.cancelled() else done.exception()
        for mine in self._waits:
            if mine.done():
                continue
            if done.cancelled():
                mine.cancel()
            elif error is not None:
                mine.set_exception(error)
            else:
                mine.set_result(done.result())

    def wake(self) -> None:
        """The store says this round may have a result (pub/sub, or this replica's compute)."""
        self._woken = True
        if self._sleep is not None and not self._sleep.done():
            self._sleep.set_result(None)

    def close(self, error: Exception) -> None:
        """Answer every waiter with `error`; stop watching."""
        if not self.done.done():
            self.done.set_exception(error)
            self.done.exception()  # retrieved: no "never retrieved" warning
        self.task.cancel()

    async def wait(self, m: Member, count: int, deadline: float) -> MemberResult:
        """Wait here until the round's result or the member's deadline, then answer m (after
        its pace turn: see the module docstring); `count`: the members the store held when
        this one was added."""
        self._enter(m)
        if count >= self.size:
            self.wake()
        try:
            result: RoundResult | None = None
            if self.done.done():
                result = self.done.result()
            else:  # a future of its own, set by `_settled`: no shield (two callbacks) per waiter
                mine = self.done.get_loop().create_future()
                self._waits.append(mine)
                try:  # asyncio.timeout, not wait_for: no task per waiter (3.11)
                    async with asyncio.timeout_at(deadline):
                        result = await mine
                except TimeoutError:
                    pass
                finally:
                    self._waits.remove(mine)
            await self.ctx.pace.turn()
            if result is not None:
                return self._answer(result, m)
            answer = await self._at_deadline(m, deadline + GRACE_S)
            if not self.raw and answer.reason in (MemberReason.SHORT, MemberReason.COMPUTING):
                self.raw = True
                raw_round(self.ctx, m, answer)
            return answer
        finally:
            self._leave(m)

    def _enter(self, m: Member) -> None:
        ctx = self.ctx
        ctx.stats.members += 1
        ctx.waiting += 1
        ctx.waiting_by[m.tenant] = ctx.waiting_by.get(m.tenant, 0) + 1
        self.waiters += 1
        self.local[m.mid] = m.reward

    def _leave(self, m: Member) -> None:
        """m waits here no more; the round's last waiter here takes it off the replica's."""
        ctx = self.ctx
        self.waiters -= 1
        ctx.waiting -= 1
        if (left := ctx.waiting_by[m.tenant] - 1) > 0:
            ctx.waiting_by[m.tenant] = left
        else:
            del ctx.waiting_by[m.tenant]
        key = (self.gid, self.rnd)
        if self.waiters == 0 and ctx.rounds.get(key) is self:
            del ctx.rounds[key]
            self.task.cancel()
            if (opened := ctx.open_by.get(m.tenant, 0) - 1) > 0:
                ctx.open_by[m.tenant] = opened
            else:
                ctx.open_by.pop(m.tenant, None)

    def _answer(self, result: RoundResult, m: Member) -> MemberResult:
        answer = answer_of(result, m)
        if not answer.complete:
            self.ctx.stats.timeouts += 1
        return answer

    # -- the watch ----------------------------------------------------------------------------

    async def _watch(self) -> None:
        """Until the round's result exists: look, compute it if it is whole and nobody else is,
        sleep until woken (this replica's compute, pub/sub) or the next poll."""
        store = self.ctx.store
        delay, retry = 0.05, False
        while True:
            self._woken = False
            try:
                async with asyncio.timeout(5.0):
                    result, count = await store.poll(self.gid, self.rnd)
                retry = False
                if result is None and count >= self.size:
                    result = await self._compute_once()
                    retry = result is None  # claimed elsewhere: it may be released unfinished
                if result is not None:
                    if not self.done.done():
                        self.done.set_result(result)
                    return
            except asyncio.CancelledError:
                raise
            except (InvalidInput, LimitExceeded) as e:  # the whole group breaks a rule
                if not self.done.done():
                    self.done.set_exception(
                        type(e)(f"group {self.gid!r} cannot be reweighted: {e.message}")
                    )
                return
            except Exception as e:  # Redis away, engine overloaded: try again until deadlines
                stop_if_cancelled(e)
                (log.debug if retry else log.warning)("assembly of %r: %r; retrying", self.gid, e)
                retry = True
            wait = delay if (store.polling or retry) else None
            if self._woken:  # woken while it looked: look again
                continue
            self._sleep = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._sleep, wait)
            except TimeoutError:
                delay = min(delay * 2, _POLL_MAX_S)
            finally:
                self._sleep = None

    async def _compute_once(self) -> RoundResult | None:
        """Reweight the round unless another replica has claimed it; survives our waiters
        leaving (shielded), so a claimed round is always finished or released."""
        token = self.ctx.token()
        if not await self.ctx.store.claim(self.gid, token, self.ctx.claim_ttl_s):
            return None
        compute = self.ctx.spawn(self._compute(token), f"asm-c:{self.gid}")
        return await asyncio.shield(compute)

    async def _compute(self, token: str) -> RoundResult | None:
        store, gid = self.ctx.store, self.gid
        renewing = asyncio.create_task(self._renew(token), name=f"asm-r:{gid}")
        try:
            group = await store.members(gid)
            if group is None or group.round != self.rnd or len(group.members) < self.size:
                return None  # expired or closed under us
            request = group.request(gid)
            out = (await self.ctx.engine.areweight(request)).groups[0]
            stored = await store.finish(gid, group.result(out.rewards, out.advantages, out.stats))
            if stored is not None:
                self.ctx.stats.groups_computed += 1
            return stored
        finally:
            renewing.cancel()
            with contextlib.suppress(Exception):  # after finish: a no-op (the claim is gone)
                await store.release(gid, token)

    async def _renew(self, token: str) -> None:
        """Keep the claim while the compute runs, so no replica takes it over and computes the
        round again; a claim lost anyway (the store was away longer than its TTL) is logged:
        `finish` still stores one result only."""
        ttl = self.ctx.claim_ttl_s
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                if not await self.ctx.store.renew(self.gid, token, ttl):
                    log.warning("assembly of %r: the compute claim was lost", self.gid)
                    return
            except Exception as e:  # the next renewal may get through
                stop_if_cancelled(e)
                log.debug("assembly of %r: claim not renewed: %r", self.gid, e)

    # -- the deadline -------------------------------------------------------------------------

    async def _at_deadline(self, m: Member, answer_by: float) -> MemberResult:
        """The round's answer when it has one by `answer_by` (closing it here if it is still
        short), else this member's own raw answer."""
        store = self.ctx.store
        try:
            result, count = await bounded(store, store.poll(m.key, self.rnd), answer_by)
            if result is None and count < self.size:
                result = await self._close_short(m, answer_by)
            if result is None and count < self.size:  # claimed elsewhere: closing, most likely
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(answer_by):
                        result = await asyncio.shield(self.done)
            if result is not None:
                return self._answer(result, m)
            group = await bounded(store, store.members(m.key), answer_by)
            present = dict(self.local)
            if group is not None and group.round == self.rnd:
                present = {mid: rec.reward for mid, rec in group.members.items()}
            reason = MemberReason.COMPUTING if len(present) >= self.size else MemberReason.SHORT
            return self._raw_answer(m, present, reason)
        except StoreUnavailable as e:
            log.warning("answer for %r from this replica's members: %s", m.gid, e)
            return self._raw_answer(m, dict(self.local), MemberReason.STORE_UNAVAILABLE)

    async def _close_short(self, m: Member, by: float) -> RoundResult | None:
        """Close the round as it is (short), unless someone else holds it or it became whole."""
        store, token = self.ctx.store, self.ctx.token()
        if not await bounded(store, store.claim(m.key, token, self.ctx.claim_ttl_s), by):
            return None
        try:
            for _ in range(3):  # a member may arrive between the read and the close
                group = await bounded(store, store.members(m.key), by)
                if group is None or group.round != self.rnd or len(group.members) >= self.size:
                    return None  # gone, or whole after all: the watcher computes it
                stored = await bounded(store, store.finish(m.key, _short_result(group)), by)
                if stored is not None:
                    return stored
            return None
        finally:
            with contextlib.suppress(Exception):
                await store.release(m.key, token)

    def _raw_answer(
        self, m: Member, present: dict[str, float], reason: MemberReason
    ) -> MemberResult:
        """This member alone answered raw, over the members `present` (not stored)."""
        present[m.mid] = m.reward  # present even if its round expired meanwhile
        ids = sorted(present)
        adv = raw_advantages([present[i] for i in ids], m.meta.advantages, m.meta.advantage_params)
        self.ctx.stats.timeouts += 1
        return MemberResult(
            group_id=m.gid,
            member_id=m.mid,
            reward=m.reward,
            raw_reward=m.reward,
            advantage=adv[ids.index(m.mid)] if adv is not None else None,
            complete=False,
            reason=reason,
            stats=None,
            members=len(ids),
            round=self.rnd,
        )


def _short_result(group: OpenRound) -> RoundResult:
    _, records = group.ordered()
    adv = raw_advantages(
        [r.reward for r in records], group.meta.advantages, group.meta.advantage_params
    )
    return group.result(None, adv, None)


# -- a member's answer off its round --------------------------------------------------------


def conflict(
    have: GroupMeta, stored: tuple[float, Mapping[str, str]] | None, m: Member
) -> Conflict | PreconditionFailed | None:
    """The 409 for member m against what its round holds: the round's settings (`have`) and,
    when the round holds m's id, its stored (reward, digests). It names the first field that
    differs, SHARED fields first, then PAYLOAD; None when m fits (a new member, or a retry)."""
    want = m.meta
    if have != want:
        for name in SHARED:
            if getattr(have, name) != getattr(want, name):
                return PreconditionFailed(
                    f"is {getattr(want, name)!r} but group {m.gid!r} has {getattr(have, name)!r}",
                    field=name,
                )
        if have.input != want.input:
            gives = f"group {m.gid!r} members give {have.input}s"
            return PreconditionFailed(gives, field=want.input)
        if have.quality != want.quality:  # all or none: quality apart, or the whole reward
            given = "give" if have.quality else "give no"
            return PreconditionFailed(
                f"group {m.gid!r} members {given} quality: every member of a group gives it "
                "or none does",
                field="quality",
            )
        return PreconditionFailed(
            f"has dimension {want.dim} but group {m.gid!r} has {have.dim}", field="embedding"
        )
    if stored is None:
        return None
    reward, digests = stored
    for name in PAYLOAD:
        same = (
            reward == m.record.reward
            if name == "reward"
            else (digests.get(name) == m.record.digests.get(name))
        )
        if not same:
            return Conflict(
                f"member {m.mid!r} of group {m.gid!r} was already sent with a different {name}",
                field=name,
            )
    return None


def answer_of(result: RoundResult, m: Member) -> MemberResult:
    """Member m's answer from its round's result; a 409 when m differs from what the round
    holds under its id (`conflict`: the same rule before and after the round was answered)."""
    if m.mid not in result.ids:  # finish checks the count: only a store that lost state
        if error := conflict(result.meta, None, m):
            raise error
        raise StoreUnavailable(
            f"round {result.round} of group {m.gid!r} was answered without member "
            f"{m.mid!r}; send it again"
        )
    i = result.ids.index(m.mid)
    if error := conflict(result.meta, (result.raw[i], result.digests[i]), m):
        raise error
    return member_answer(result, m.gid, i)


def member_answer(result: RoundResult, group_id: str, i: int) -> MemberResult:
    """The answer of the member at position i of a round's result (reweighted when the round
    was whole, raw when it closed short)."""
    complete = result.complete
    return MemberResult(
        group_id=group_id,
        member_id=result.ids[i],
        reward=result.rewards[i],
        raw_reward=result.raw[i],
        advantage=result.advantages[i] if result.advantages is not None else None,
        complete=complete,
        reason=None if complete else MemberReason.SHORT,
        stats=result.stats if complete else None,
        members=len(result.ids),
        round=result.round,
    )


def answered(result: RoundResult, m: Member, reuse_ids: bool) -> MemberResult | None:
    """m's answer from an answered round that holds its id (a retry; a 409 when it differs),
    or None: m belongs in a later round (its id is not there, or it is reused on purpose with
    another payload or settings)."""
    if m.mid not in result.ids:
        return None
    i = result.ids.index(m.mid)
    if reuse_ids and conflict(result.meta, (result.raw[i], result.digests[i]), m) is not None:
        return None
    return answer_of(result, m)
