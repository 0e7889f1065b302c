"""Assembly tests: the real engine (the session `engine` of tests/conftest.py), real Redis,
helpers to build groups. `build` makes assemblers on the store of `store_kind`, which runs every
contract test twice in one run: on the in-process store and on Redis (the shared 127.0.0.1:6379
when it answers, with a key prefix of the test's own, else a private redis-server)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
from conftest import loopback

from reweighter.assembly import GroupAssembler, MemberSubmission, MemoryStore, make_store
from reweighter.engine import ReweightEngine
from reweighter.limits import AssemblyLimits
from reweighter.types import Group, ReweightRequest

settings = loopback  # the suite's test settings (compile off: REWEIGHTER_COMPILE in conftest)


@pytest.fixture
def prefix(shared_redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own on the shared Redis; its keys are deleted afterwards."""
    p = f"test:asm:{uuid.uuid4().hex}:"
    yield p
    client = redis.Redis.from_url(shared_redis_url)
    keys = list(client.scan_iter(match=f"{p}*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Which store a contract test runs on: each runs on both."""
    return request.param


@pytest.fixture
def store_settings(store_kind: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The settings that select the store (and this test's Redis key prefix)."""
    if store_kind == "memory":
        return {}
    url = request.getfixturevalue("shared_redis_url")
    return {"redis_url": url, "assembly_prefix": request.getfixturevalue("prefix")}


Build = Callable[..., GroupAssembler]


class Clock:
    """The in-process store's clock in these tests: this process's monotonic clock plus what the
    test skipped ahead. `later` on it costs no wall time; on Redis (whose `TIME` is the clock of
    every replica and cannot be moved) it is a real sleep."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.skipped


@pytest.fixture
def clock() -> Clock:
    return Clock()


Later = Callable[[float], Awaitable[None]]


@pytest.fixture
def later(store_kind: str, clock: Clock) -> Later:
    """`await later(s)`: s seconds pass on the store's clock (instantly on the memory store)."""

    async def wait(seconds: float) -> None:
        if store_kind == "memory":
            clock.skipped += seconds
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(seconds)

    return wait


@pytest.fixture
async def build(
    engine: ReweightEngine, store_settings: dict[str, Any], clock: Clock
) -> AsyncIterator[Build]:
    """`build(engine=..., claim_ttl_s=..., **settings)`: an assembler on this test's store (the
    memory store on `clock`); with Redis, every assembler built shares it (replicas). All are
    closed after the test."""
    made: list[GroupAssembler] = []

    def make(eng: Any = None, claim_ttl_s: float | None = None, **overrides: Any) -> GroupAssembler:
        s = settings(**{**store_settings, **overrides})
        kw = {} if claim_ttl_s is None else {"claim_ttl_s": claim_ttl_s}
        limits = AssemblyLimits.from_settings(s)
        store = make_store(s) if s.redis_url else MemoryStore(limits, clock)
        asm = GroupAssembler(eng or engine, store, s, **kw)
        made.append(asm)
        return asm

    yield make
    for asm in made:
        await asm.aclose()


@pytest.fixture
async def assembler(build: Build) -> GroupAssembler:
    return build()


async def waiting(asm: GroupAssembler, n: int, timeout_s: float = 20.0) -> None:
    """Until `n` members wait on `asm` (a store call takes longer on Redis on a loaded machine
    than any fixed sleep a test would pick)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while asm.waiting < n:
        assert loop.time() < end, f"{asm.waiting} of {n} members waiting"
        await asyncio.sleep(0.01)


def embedded_group(
    gid: str, n: int, rng: random.Random, dim: int = 8, **kw: object
) -> list[MemberSubmission]:
    """n members with random embeddings and 0/1 rewards; member ids not in string order."""
    ids = [str(rng.randrange(10**6)) + f"-{i}" for i in range(n)]
    return [
        MemberSubmission(
            group_id=gid,
            member_id=mid,
            group_size=n,
            reward=float(rng.random() < 0.5),
            embedding=[rng.gauss(0, 1) for _ in range(dim)],
            **kw,  # type: ignore[arg-type]
        )
        for mid in ids
    ]


def ordered_request(members: list[MemberSubmission]) -> ReweightRequest:
    """What /v1/reweight would get for the group listed in member_id order."""
    ms = sorted(members, key=lambda m: m.member_id)
    first = ms[0]
    if first.completion is not None:
        group = Group(rewards=[m.reward for m in ms], completions=[m.completion for m in ms])
    else:
        group = Group(rewards=[m.reward for m in ms], embeddings=[m.embedding for m in ms])
    return ReweightRequest([group], first.method, dict(first.params), first.advantages)
