"""GroupAssembler: members of a group arrive one at a time (any replica, any order, retried);
once the group is whole it is reweighted once, in member_id order, and every waiter answered.

Why this shape: verl and OpenRLHF hand a reward one sample at a time, but DRA and MMR need the
whole group. All state lives behind `AssemblyStore` (in process, or Redis for replicas), so the
rules here are the same either way. Waiting is one asyncio future per member plus one watcher
task per group on this replica: tens of thousands of waiters cost no threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..config import Settings
from ..engine import ReweightEngine
from ..errors import (
    Conflict,
    InvalidInput,
    LimitExceeded,
    Overloaded,
    PreconditionFailed,
    ReweighterError,
    StoreUnavailable,
)
from ..methods import advantages as advantage_fn
from ..methods import get_method
from ..types import Group, GroupStats, ReweightRequest
from .store import AssemblyStore
from .types import MemberResult, MemberSubmission

log = logging.getLogger(__name__)

_MAX_ID_CHARS = 256
_CLAIM_TTL_S = 60.0  # a replica that dies mid-compute blocks its group at most this long
_POLL_MAX_S = 1.0  # polling backoff cap (Redis store, or after a failed compute)
_META_FIELDS = (("n", "group_size"), ("m", "method"), ("p", "params"), ("a", "advantages"))


@dataclass
class AssemblyStats:
    """Plain counters; the transports export them to /metrics."""

    members: int = 0  # submissions accepted (retries included)
    timeouts: int = 0  # answers with complete=False
    groups_computed: int = 0  # groups this replica reweighted
    conflicts: int = 0  # Conflict and PreconditionFailed answers


@dataclass(frozen=True)
class _Member:
    """A validated submission in the store's encoding."""

    sub: MemberSubmission
    reward: float
    kind: str  # "completion" | "embedding"
    digest: str
    meta: str
    record: str
    timeout_s: float


class _Watch:
    """This replica's waiters of one group, and the task that watches the store for them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.event = asyncio.Event()
        self.done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters = 0
        self.local: dict[str, float] = {}  # member -> raw reward, of those that waited here
        self.task: asyncio.Task[None] | None = None


class GroupAssembler:
    def __init__(self, engine: ReweightEngine, store: AssemblyStore, settings: Settings) -> None:
        self.engine = engine
        self.store = store
        self.settings = settings
        self.stats = AssemblyStats()
        self._token = uuid.uuid4().hex  # this replica's claim token
        self._watches: dict[str, _Watch] = {}
        self._computing: set[asyncio.Task[Any]] = set()
        self._waiting = 0
        self._started = False

    @property
    def waiting(self) -> int:
        """Members waiting on this replica now."""
        return self._waiting

    @property
    def open_groups(self) -> int:
        """Groups with a member waiting on this replica now."""
        return len(self._watches)

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self.store.start(self._on_done)

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
        for task in list(self._computing):
            task.cancel()
        await self.store.aclose()

    def _on_done(self, group_id: str) -> None:
        watch = self._watches.get(group_id)
        if watch is not None:
            watch.event.set()

    # -- the call --------------------------------------------------------------------------

    async def submit(self, sub: MemberSubmission) -> MemberResult:
        """Add the member and wait for its group; see MemberResult for what comes back."""
        await self.start()
        m = self._check(sub)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + m.timeout_s
        if self._waiting >= self.settings.assembly_max_held_members:
            raise Overloaded(f"{self._waiting} members are already waiting here; retry later")
        out = await self._bounded(
            self.store.add(sub.group_id, sub.member_id, m.meta, m.record, sub.group_size),
            deadline,
        )
        if out.kind == "done":
            return self._answer(json.loads(out.value), m)
        if out.kind == "precondition":
            self._precondition(out.value, m)
        if out.kind == "full":
            self.stats.conflicts += 1
            raise PreconditionFailed(
                f"group {sub.group_id!r} already has {out.count} members, none of them "
                f"{sub.member_id!r} (group_size {sub.group_size})",
                field="member_id",
            )
        if out.kind == "overloaded":
            raise Overloaded(f"too many {out.value} held for assembly; retry later")
        if out.kind == "exists":
            self._same_payload(json.loads(out.value), m)
        self.stats.members += 1
        return await self._wait(m, deadline, out.count)

    async def _wait(self, m: _Member, deadline: float, count: int) -> MemberResult:
        gid = m.sub.group_id
        watch = self._watches.get(gid)
        if watch is None:
            watch = self._watches[gid] = _Watch(m.sub.group_size)
            watch.task = asyncio.create_task(self._watch(gid, watch), name=f"assembly:{gid}")
        watch.waiters += 1
        watch.local[m.sub.member_id] = m.reward
        self._waiting += 1
        if count >= watch.size:
            watch.event.set()
        loop = asyncio.get_running_loop()
        # keep a slice of the budget for the timeout answer's store reads
        reserve = min(2.0, m.timeout_s * 0.25)
        try:
            try:
                result = await asyncio.wait_for(
                    asyncio.shield(watch.done), max(0.0, deadline - reserve - loop.time())
                )
            except TimeoutError:
                return await self._timeout_answer(m, deadline, watch)
            return self._answer(result, m)
        finally:
            watch.waiters -= 1
            self._waiting -= 1
            if watch.waiters == 0 and self._watches.get(gid) is watch:
                del self._watches[gid]
                if watch.task is not None:
                    watch.task.cancel()

    async def _watch(self, gid: str, watch: _Watch) -> None:
        """Until the group's result exists: look, compute it if it is whole and nobody else is,
        sleep until woken (this replica's compute, pub/sub) or the next poll."""
        delay, failed = 0.05, False
        while True:
            watch.event.clear()
            try:
                result, count = await asyncio.wait_for(self.store.poll(gid), 5.0)
                if result is None and count >= watch.size:
                    result = await self._compute_once(gid, watch.size)
                if result is not None:
                    if not watch.done.done():
                        watch.done.set_result(json.loads(result))
                    return
                failed = False
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Redis away, engine overloaded: try again until timeouts
                (log.debug if failed else log.warning)("assembly of %r: %r; retrying", gid, e)
                failed = True
            wait = delay if (self.store.polling or failed) else None
            try:
                await asyncio.wait_for(watch.event.wait(), wait)
            except TimeoutError:
                delay = min(delay * 2, _POLL_MAX_S)

    async def _compute_once(self, gid: str, size: int) -> str | None:
        """Reweight the group unless another replica has claimed it; survives our waiters
        leaving (shielded), so a claimed group is always finished or released."""
        if not await self.store.claim(gid, self._token, _CLAIM_TTL_S):
            return None
        task = asyncio.create_task(self._compute(gid, size))
        self._computing.add(task)
        task.add_done_callback(self._computing.discard)
        return await asyncio.shield(task)

    async def _compute(self, gid: str, size: int) -> str | None:
        try:
            records = await self.store.members(gid)
            if len(records) < size:  # expired under us
                await self.store.release(gid, self._token)
                return None
            ids = sorted(records)
            recs = [json.loads(records[i]) for i in ids]
            meta = json.loads(recs[0]["meta"])
            rewards, values = [r["r"] for r in recs], [r["v"] for r in recs]
            group = (
                Group(rewards=rewards, completions=values, id=gid)
                if meta["k"] == "completion"
                else Group(rewards=rewards, embeddings=values, id=gid)
            )
            request = ReweightRequest([group], meta["m"], meta["p"], meta["a"])
            out = (await self.engine.areweight(request)).groups[0]
        except BaseException:
            with contextlib.suppress(Exception):
                await self.store.release(gid, self._token)
            raise
        result = {
            "meta": recs[0]["meta"],
            "ids": ids,
            "raw": [r["r"] for r in recs],
            "d": [r["d"] for r in recs],
            "rw": out.rewards,
            "adv": out.advantages,
            "ms": out.stats.mean_similarity,
            "lam": out.stats.lambda_,
        }
        self.stats.groups_computed += 1
        return await self.store.finish(gid, json.dumps(result))

    # -- answers ---------------------------------------------------------------------------

    def _answer(self, result: dict[str, Any], m: _Member) -> MemberResult:
        sub = m.sub
        if result["meta"] != m.meta:
            self._precondition(result["meta"], m)
        try:
            i = result["ids"].index(sub.member_id)
        except ValueError:
            self.stats.conflicts += 1
            raise PreconditionFailed(
                f"group {sub.group_id!r} is already complete without member {sub.member_id!r}",
                field="member_id",
            ) from None
        self._same_payload({"r": result["raw"][i], "d": result["d"][i]}, m)
        adv = result["adv"]
        return MemberResult(
            group_id=sub.group_id,
            member_id=sub.member_id,
            reward=result["rw"][i],
            raw_reward=result["raw"][i],
            advantage=adv[i] if adv is not None else None,
            complete=True,
            reason=None,
            stats=GroupStats(mean_similarity=result["ms"], lambda_=result["lam"]),
            members=len(result["ids"]),
        )

    async def _timeout_answer(self, m: _Member, deadline: float, watch: _Watch) -> MemberResult:
        """The group is still short: raw reward, advantage over the members present. When the
        store cannot say who is present by the deadline (Redis down or swamped), over the
        members that waited on this replica: a degraded answer on time rather than an error."""
        try:
            result, _ = await self._bounded(self.store.poll(m.sub.group_id), deadline)
            if result is not None:  # finished just now
                return self._answer(json.loads(result), m)
            records = await self._bounded(self.store.members(m.sub.group_id), deadline)
            raw = {mid: json.loads(rec)["r"] for mid, rec in records.items()}
        except StoreUnavailable as e:
            log.warning("timeout answer for %r from this replica's members: %s", m.sub.group_id, e)
            raw = dict(watch.local)
        raw[m.sub.member_id] = m.reward  # present even if the open group expired meanwhile
        ids = sorted(raw)
        adv = None
        if m.sub.advantages != "none":
            values = torch.tensor([raw[i] for i in ids], dtype=torch.float32)
            adv = float(advantage_fn(values, m.sub.advantages)[ids.index(m.sub.member_id)])
        self.stats.timeouts += 1
        return MemberResult(
            group_id=m.sub.group_id,
            member_id=m.sub.member_id,
            reward=m.reward,
            raw_reward=m.reward,
            advantage=adv,
            complete=False,
            reason="timeout",
            stats=None,
            members=len(ids),
        )

    # -- checks ----------------------------------------------------------------------------

    def _precondition(self, stored_meta: str, m: _Member) -> None:
        self.stats.conflicts += 1
        have, want = json.loads(stored_meta), json.loads(m.meta)
        for key, name in _META_FIELDS:
            if have[key] != want[key]:
                raise PreconditionFailed(
                    f"is {want[key]!r} but group {m.sub.group_id!r} has {have[key]!r}", field=name
                )
        if have["k"] != want["k"]:
            raise PreconditionFailed(
                f"group {m.sub.group_id!r} members give {have['k']}s", field=m.kind
            )
        raise PreconditionFailed(
            f"has dimension {want['dim']} but group {m.sub.group_id!r} has {have['dim']}",
            field="embedding",
        )

    def _same_payload(self, stored: dict[str, Any], m: _Member) -> None:
        for key, name in (("r", "reward"), ("d", m.kind)):
            if stored[key] != (m.reward if key == "r" else m.digest):
                self.stats.conflicts += 1
                raise Conflict(
                    f"member {m.sub.member_id!r} of group {m.sub.group_id!r} was already sent "
                    f"with a different {name}",
                    field=name,
                )

    async def _bounded(self, awaitable: Any, deadline: float) -> Any:
        """A store call that cannot outlive the member's deadline."""
        left = deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(awaitable, max(0.01, left))
        except TimeoutError:
            op = getattr(awaitable, "__qualname__", "call")
            raise StoreUnavailable(f"the assembly store did not answer in time ({op})") from None

    def _check(self, sub: MemberSubmission) -> _Member:
        s = self.settings
        for name in ("group_id", "member_id"):
            value = getattr(sub, name)
            if not isinstance(value, str) or not value:
                raise InvalidInput("must be a non-empty string", field=name)
            if len(value) > _MAX_ID_CHARS:
                raise InvalidInput(f"longer than {_MAX_ID_CHARS} characters", field=name)
        size = sub.group_size
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
            raise InvalidInput("must be a positive integer", field="group_size")
        if size > s.max_group_size:
            raise LimitExceeded(
                f"{size} exceeds the group limit of {s.max_group_size}", field="group_size"
            )
        timeout = s.assembly_timeout_s if sub.timeout_s is None else sub.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise InvalidInput("must be a number of seconds", field="timeout_s")
        if not math.isfinite(timeout) or timeout <= 0:
            raise InvalidInput("must be a positive number of seconds", field="timeout_s")
        timeout = min(float(timeout), s.assembly_max_timeout_s)
        has_c, has_e = sub.completion is not None, sub.embedding is not None
        if has_c == has_e:
            raise InvalidInput("give either completion or embedding", field="completion")
        group = (
            Group(rewards=[sub.reward], completions=[sub.completion])
            if has_c
            else Group(rewards=[sub.reward], embeddings=[sub.embedding])
        )
        try:
            self.engine.validate(
                ReweightRequest([group], sub.method, dict(sub.params or {}), sub.advantages)
            )
        except ReweighterError as e:
            raise type(e)(e.message, field=_member_field(e.field)) from e
        spec = get_method(sub.method)
        params = spec.params_model.model_validate(dict(sub.params or {})).model_dump(
            by_alias=True
        )
        reward = float(sub.reward)
        if has_c:
            kind, value, dim = "completion", sub.completion, None
            digest = hashlib.sha256(str(value).encode("utf-8", "surrogatepass")).hexdigest()
        else:
            arr = np.asarray(sub.embedding, dtype=np.float32)
            kind, value, dim = "embedding", arr.tolist(), int(arr.shape[0])
            digest = hashlib.sha256(arr.tobytes()).hexdigest()
        meta = json.dumps(
            {"n": int(size), "m": spec.name, "p": params, "a": sub.advantages, "k": kind,
             "dim": dim},
            sort_keys=True,
            separators=(",", ":"),
        )
        record = json.dumps({"r": reward, "d": digest, "v": value, "meta": meta})
        return _Member(sub, reward, kind, digest, meta, record, timeout)


def _member_field(field: str | None) -> str | None:
    """The engine names fields of a one-member request (groups[0].rewards[0]); a member's
    fields are flat."""
    if field is None or not field.startswith("groups"):
        return field
    for part, name in (("rewards", "reward"), ("completions", "completion"),
                       ("embeddings", "embedding")):
        if part in field:
            return name
    return "completion"
