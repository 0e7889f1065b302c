"""Assembly shared through a real Redis: replicas (two assemblers, two stores) assemble one
group, compute it once, answer their own waiters; bounds hold; a Redis lost mid-assembly never
hangs a member past its timeout."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest
import redis

from reweighter.assembly import GroupAssembler, MemberSubmission, make_store
from reweighter.engine import ReweightEngine
from reweighter.errors import Overloaded, StoreUnavailable

from .conftest import embedded_group, ordered_request, settings


def replicas(engine: ReweightEngine, url: str, prefix: str, n: int = 2, **kw: object):
    s = settings(redis_url=url, assembly_prefix=prefix, **kw)
    return [GroupAssembler(engine, make_store(s), s) for _ in range(n)]


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
        left = sorted(k for k in client.scan_iter(match=f"{prefix}*") if not k.endswith(":res"))
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
            assert (r.complete, r.reason, r.members) == (False, "timeout", 2)
            assert r.reward == r.raw_reward == m.reward
            assert r.advantage == pytest.approx(m.reward - mean, abs=1e-6)
        assert reps[0].stats.timeouts == reps[1].stats.timeouts == 1
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
        waiting = [
            asyncio.create_task(reps[i % 2].submit(m)) for i, m in enumerate(g[:3])
        ]
        await asyncio.sleep(0.3)
        redis_server.stop()
        outcomes = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
        assert loop.time() - start < 1.5 + 1.0  # slack for a loaded machine
        # no store to say who is present: the timeout answer over the members that waited on
        # the member's own replica (g[0], g[2] on the first, g[1] on the second)
        for i, o in enumerate(outcomes):
            assert (o.complete, o.reason, o.stats) == (False, "timeout", None)
            assert o.reward == o.raw_reward == g[i].reward
            assert o.members == (2 if i % 2 == 0 else 1)
        start = loop.time()
        with pytest.raises(StoreUnavailable) as e:  # a new member is told at once
            await reps[0].submit(g[3])
        assert loop.time() - start < 1.5 and e.value.http_status == 503
    finally:
        for r in reps:
            await r.aclose()
