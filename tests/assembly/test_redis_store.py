"""Assembly shared through a real Redis: replicas (two assemblers, two stores) assemble one
group, compute it once (even when the compute outlives its claim), answer their own waiters;
bounds hold; replicas with skewed clocks agree on deadlines (Redis's TIME is the one clock); a
Redis lost mid-assembly never hangs a member past its timeout. The rules themselves run on both
stores in test_contract.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
import time
from typing import Any

import pytest
import redis

from reweighter.assembly import GroupAssembler, MemberSubmission, make_store
from reweighter.assembly.records import SCHEMA_VERSION
from reweighter.engine import ReweightEngine
from reweighter.errors import Overloaded, StoreUnavailable
from reweighter.types import ReweightRequest, ReweightResult

from .conftest import embedded_group, ordered_request, settings, waiting


def replicas(
    engine: Any, url: str, prefix: str, n: int = 2, claim_ttl_s: float = 60.0, **kw: object
) -> list[GroupAssembler]:
    s = settings(redis_url=url, assembly_prefix=prefix, **kw)
    return [GroupAssembler(engine, make_store(s), s, claim_ttl_s=claim_ttl_s) for _ in range(n)]


class SlowEngine:
    """The real engine, each reweight taking `delay_s` longer (a slow encoder), counted."""

    def __init__(self, engine: ReweightEngine, delay_s: float) -> None:
        self.engine, self.delay_s, self.calls = engine, delay_s, 0

    async def areweight(self, request: ReweightRequest) -> ReweightResult:
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        return await self.engine.areweight(request)


async def test_a_compute_that_outlives_its_claim_is_not_recomputed_elsewhere(
    engine: ReweightEngine, shared_redis_url: str, prefix: str
) -> None:
    """The claim lasts 1 s, the compute 3 s: the computing replica renews its claim (every
    third of its TTL), so the other replica (whose watcher polls the whole round meanwhile)
    never takes it over. (A 0.3 s claim was lost to a loaded machine's event-loop stalls.)"""
    slow = SlowEngine(engine, 3.0)
    reps = replicas(slow, shared_redis_url, prefix, claim_ttl_s=1.0)
    try:
        g = embedded_group("slow", 2, random.Random(21), advantages="grpo", timeout_s=10)
        sent = (r.submit(m) for r, m in zip(reps, g, strict=True))
        got = await asyncio.wait_for(asyncio.gather(*sent), 15)
        want = (await engine.areweight(ordered_request(g))).groups[0]
        order = sorted(m.member_id for m in g)
        for r in got:
            assert r.complete
            assert r.reward == pytest.approx(want.rewards[order.index(r.member_id)], abs=1e-6)
        assert slow.calls == 1
        assert sum(r.stats.groups_computed for r in reps) == 1
    finally:
        for r in reps:
            await r.aclose()


async def test_replicas_with_skewed_clocks_agree_on_deadlines(
    engine: ReweightEngine, shared_redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One replica's wall clock an hour slow, the other's an hour fast: an open round expires
    when its deadline passes on Redis's clock, for both (no replica drops it an hour early or
    keeps it an hour late)."""
    from reweighter.assembly.records import GroupMeta, MemberRecord

    slow_rep, fast_rep = replicas(engine, shared_redis_url, prefix)
    real = time.time
    meta = GroupMeta(group_size=2, method="dra", params={}, advantages="none",
                     input="embedding", dim=2)  # fmt: skip
    rec = MemberRecord(reward=1.0, digests={"embedding": "d"}, value=[1.0, 0.0])

    def clock(offset_s: float) -> None:
        monkeypatch.setattr(time, "time", lambda: real() + offset_s)

    try:
        clock(-3600.0)
        await slow_rep.store.add("opened-slow", "a", meta, rec, 2, ttl_s=1.0)
        clock(+3600.0)
        await fast_rep.store.add("opened-fast", "a", meta, rec, 2, ttl_s=1.0)
        assert await fast_rep.store.counts() == (2, 2)  # the slow one's is not expired here
        clock(-3600.0)
        assert await slow_rep.store.counts() == (2, 2)
        await asyncio.sleep(1.3)  # both deadlines passed on Redis's clock
        for rep, offset in ((slow_rep, -3600.0), (fast_rep, 3600.0)):
            clock(offset)
            assert await rep.store.counts() == (0, 0)  # the fast one's is not kept an hour
            assert await rep.store.members("opened-fast") is None
    finally:
        monkeypatch.setattr(time, "time", real)
        for r in (slow_rep, fast_rep):
            await r.aclose()


async def test_replicas_assemble_compute_once_and_answer_retries(
    engine: ReweightEngine, shared_redis_url: str, prefix: str
) -> None:
    reps = replicas(engine, shared_redis_url, prefix)
    try:
        rng = random.Random(5)
        groups = [embedded_group(f"r{i}", 8, rng, advantages="grpo") for i in range(12)]
        jobs = [(m, rng.randrange(2)) for g in groups for m in g]
        rng.shuffle(jobs)
        results = await asyncio.wait_for(
            asyncio.gather(*(reps[r].submit(m) for m, r in jobs)), 30
        )
        answers = {(r.group_id, r.member_id): r for r in results}
        for g in groups:
            want = (await engine.areweight(ordered_request(g))).groups[0]
            order = sorted(m.member_id for m in g)
            for m in g:
                got = answers[(m.group_id, m.member_id)]
                assert got.complete
                assert got.reward == pytest.approx(want.rewards[order.index(m.member_id)], abs=1e-6)
        assert sum(r.stats.groups_computed for r in reps) == len(groups)  # once per group
        # a retry at the other replica, after completion, gets the same answer
        for m, r in jobs[:20]:
            assert await reps[1 - r].submit(m) == answers[(m.group_id, m.member_id)]
        # nothing of the open groups is left; the bookkeeping is back to zero
        client = redis.Redis.from_url(shared_redis_url, decode_responses=True)
        answered = re.compile(r".*:(res:\d+|rn|ans)$")  # answers, kept for retries (TTL)
        left = sorted(k for k in client.scan_iter(match=f"{prefix}*") if not answered.match(k))
        assert left in ([], [f"{prefix}held"]) and int(client.get(f"{prefix}held") or 0) == 0
        assert await reps[0].store.counts() == (0, 0)
    finally:
        for r in reps:
            await r.aclose()


async def test_replicas_share_the_bounds(
    engine: ReweightEngine, shared_redis_url: str, prefix: str
) -> None:
    reps = replicas(
        engine, shared_redis_url, prefix, assembly_max_open_groups=2, assembly_max_held_members=3
    )
    try:
        sub = MemberSubmission("a", "1", 4, 1.0, embedding=[1.0, 0.0], timeout_s=5)
        held = [
            asyncio.create_task(reps[i].submit(dataclasses.replace(sub, group_id=g, member_id=m)))
            for i, g, m in ((0, "a", "1"), (1, "a", "2"), (1, "b", "1"))
        ]
        await asyncio.sleep(0.3)
        assert await reps[0].store.counts() == (2, 3)
        for _ in range(40):  # the fill gauge (read every second) counts both replicas' groups
            if (reps[0].stats.store_groups, reps[0].stats.store_members) == (2, 3):
                break
            await asyncio.sleep(0.1)
        assert (reps[0].stats.store_groups, reps[0].stats.store_members) == (2, 3)
        with pytest.raises(Overloaded, match="groups"):
            await reps[0].submit(dataclasses.replace(sub, group_id="c"))
        with pytest.raises(Overloaded, match="members"):  # the store's bound, not this replica's
            await reps[0].submit(dataclasses.replace(sub, group_id="b", member_id="2"))
        for t in held:
            t.cancel()
        await asyncio.gather(*held, return_exceptions=True)
    finally:
        for r in reps:
            await r.aclose()


async def test_short_group_across_replicas_times_out_over_the_members_present(
    engine: ReweightEngine, shared_redis_url: str, prefix: str
) -> None:
    reps = replicas(engine, shared_redis_url, prefix)
    try:
        g = embedded_group("short", 4, random.Random(6), advantages="dr_grpo", timeout_s=0.6)
        short = await asyncio.gather(reps[0].submit(g[0]), reps[1].submit(g[1]))
        mean = (g[0].reward + g[1].reward) / 2
        for r, m in zip(short, g[:2], strict=True):
            assert (r.complete, r.reason, r.members, r.round) == (False, "short", 2, 0)
            assert r.reward == r.raw_reward == m.reward
            assert r.advantage == pytest.approx(m.reward - mean, abs=1e-6)
        assert reps[0].stats.timeouts == reps[1].stats.timeouts == 1
        assert await reps[0].store.counts() == (0, 0)  # closed at the first deadline
        # a latecomer at either replica opens round 1; a retry of round 0 gets its answer
        late = await reps[1].submit(g[2])
        assert (late.complete, late.round, late.members) == (False, 1, 1)
        assert await reps[1].submit(g[0]) == short[0]
        assert reps[1].stats.size_mismatch["late"] == 1
    finally:
        for r in reps:
            await r.aclose()


async def test_redis_lost_mid_assembly_never_hangs_past_the_timeout(
    engine: ReweightEngine, redis_server
) -> None:
    reps = replicas(engine, redis_server.url, "lost:")
    try:
        g = embedded_group("lost", 4, random.Random(7), timeout_s=1.5)
        loop = asyncio.get_running_loop()
        start = loop.time()
        held = [asyncio.create_task(reps[i % 2].submit(m)) for i, m in enumerate(g[:3])]
        await waiting(reps[0], 2)
        await waiting(reps[1], 1)
        redis_server.stop()
        outcomes = await asyncio.wait_for(asyncio.gather(*held, return_exceptions=True), 10)
        assert loop.time() - start < 1.5 + 2.0  # a refused connection answers at once: slack only
        # no store to say who is present: the answer over the members that waited on the
        # member's own replica (g[0], g[2] on the first, g[1] on the second)
        for i, o in enumerate(outcomes):
            assert (o.complete, o.reason, o.stats) == (False, "store_unavailable", None)
            assert o.reward == o.raw_reward == g[i].reward
            assert o.members == (2 if i % 2 == 0 else 1)
        start = loop.time()
        with pytest.raises(StoreUnavailable) as e:  # a new member is told at once
            await reps[0].submit(g[3])
        assert loop.time() - start < 1.5 and e.value.http_status == 503
    finally:
        for r in reps:
            await r.aclose()


async def test_a_record_of_another_schema_version_is_refused_not_misread(
    engine: ReweightEngine, shared_redis_url: str, prefix: str
) -> None:
    """A rolling upgrade: a replica of another version opened the group (its meta says v 99).
    This replica answers a retryable 503 naming both versions and stores nothing."""

    (rep,) = replicas(engine, shared_redis_url, prefix, n=1)
    try:
        client = redis.Redis.from_url(shared_redis_url, decode_responses=True)
        g = embedded_group("upgrade", 2, random.Random(9), timeout_s=5)
        first = asyncio.create_task(rep.submit(g[0]))
        await waiting(rep, 1)
        key = f"{prefix}g:upgrade:meta"
        newer = json.loads(client.get(key))
        newer["v"] = 99
        client.set(key, json.dumps(newer, sort_keys=True), keepttl=True)
        with pytest.raises(StoreUnavailable, match="schema version 99") as e:
            await rep.submit(g[1])
        assert e.value.http_status == 503
        assert f"reads version {SCHEMA_VERSION}" in e.value.message
        assert client.hlen(f"{prefix}g:upgrade:m") == 1  # the member was not added
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
    finally:
        await rep.aclose()


def test_records_carry_their_version_and_refuse_others() -> None:
    from reweighter.assembly.records import MemberRecord

    rec = MemberRecord(reward=0.5, digests={"embedding": "d"}, value=[1.0, 2.0])
    raw = rec.dump()
    assert json.loads(raw)["v"] == SCHEMA_VERSION and MemberRecord.load(raw) == rec
    for version in (None, SCHEMA_VERSION + 1):
        data = {**json.loads(raw), "v": version}
        with pytest.raises(StoreUnavailable, match=f"schema version {version!r}"):
            MemberRecord.load(json.dumps(data))
    with pytest.raises(StoreUnavailable, match="malformed"):
        MemberRecord.load(json.dumps({**json.loads(raw), "reward": "x"}))
