"""What a member gets when its timeout_s passes before its round has a result.

A round still short is closed at once, the same raw answer for every member present (stored, so
members on other replicas and retries get it too); a whole round still being reweighted answers
this member alone, raw (COMPUTING). Store calls end by the member's answer time; when the store
cannot answer, the members that waited on this replica stand in for those present
(STORE_UNAVAILABLE). Every number still comes from the engine: advantages of raw rewards are
computed with method "none".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ..errors import StoreUnavailable
from ..types import AdvantageKind, Group, Method, ReweightRequest
from .records import Member, OpenRound, RoundResult
from .store import AssemblyStore
from .types import MemberReason, MemberResult

log = logging.getLogger(__name__)

T = TypeVar("T")

CLAIM_TTL_S = 60.0
"""A replica that dies while computing or closing a round blocks its group at most this long."""
GRACE_S = 1.0
"""After a member's deadline: the store reads and the close of a short round."""


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


class Deadlines:
    """The answers at a member's deadline over `store`; `engine` computes advantages (anything
    with `areweight`), `token()` names a claim (unique per call), `on_raw()` is called for each
    answer of one member alone (the assembler counts them)."""

    def __init__(
        self,
        store: AssemblyStore,
        engine: Any,
        token: Callable[[], str],
        on_raw: Callable[[], None],
    ) -> None:
        self.store = store
        self.engine = engine
        self.token = token
        self.on_raw = on_raw

    async def answer(
        self,
        m: Member,
        rnd: int,
        done: asyncio.Future[RoundResult],
        waited_here: Mapping[str, float],
        answer_by: float,
        answer: Callable[[RoundResult], MemberResult],
    ) -> MemberResult:
        """`answer(result)` when the round has a result by `answer_by` (this call closes it if
        it is short), else this member's own raw answer. `done`: the round's result as this
        replica's watcher finds it; `waited_here`: member -> raw reward of those that waited
        here."""
        size = m.checked.group_size
        try:
            result, count = await bounded(self.store, self.store.poll(m.gid, rnd), answer_by)
            if result is None and count < size:
                result = await self._close_short(m, rnd, answer_by)
            if result is None and count < size:  # claimed elsewhere: closing, most likely
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(answer_by):
                        result = await asyncio.shield(done)
            if result is not None:
                return answer(result)
            group = await bounded(self.store, self.store.members(m.gid), answer_by)
            present = dict(waited_here)
            if group is not None and group.round == rnd:
                present = {mid: rec.reward for mid, rec in group.members.items()}
            reason = MemberReason.COMPUTING if len(present) >= size else MemberReason.SHORT
            return await self._raw_answer(m, rnd, present, reason)
        except StoreUnavailable as e:
            log.warning("answer for %r from this replica's members: %s", m.gid, e)
            return await self._raw_answer(m, rnd, dict(waited_here), MemberReason.STORE_UNAVAILABLE)

    async def _close_short(self, m: Member, rnd: int, by: float) -> RoundResult | None:
        """Close the round as it is (short), unless someone else holds it or it became whole."""
        token = self.token()
        if not await bounded(self.store, self.store.claim(m.gid, token, CLAIM_TTL_S), by):
            return None
        try:
            for _ in range(3):  # a member may arrive between the read and the close
                group = await bounded(self.store, self.store.members(m.gid), by)
                if group is None or group.round != rnd:
                    return None
                if len(group.members) >= m.checked.group_size:
                    return None  # whole after all: the watcher computes it
                result = await self._short_result(group)
                stored = await bounded(self.store, self.store.finish(m.gid, result), by)
                if stored is not None:
                    return stored
            return None
        finally:
            with contextlib.suppress(Exception):
                await self.store.release(m.gid, token)

    async def _short_result(self, group: OpenRound) -> RoundResult:
        _, records = group.ordered()
        raw = [r.reward for r in records]
        return group.result(None, await self._advantages(raw, group.meta.advantages), None)

    async def _raw_answer(
        self, m: Member, rnd: int, present: dict[str, float], reason: MemberReason
    ) -> MemberResult:
        """This member alone answered raw, over the members `present` (not stored)."""
        present[m.mid] = m.checked.reward  # present even if its round expired meanwhile
        ids = sorted(present)
        adv = await self._advantages([present[i] for i in ids], m.meta.advantages)
        self.on_raw()
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
