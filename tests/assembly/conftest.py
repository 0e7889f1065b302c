"""Assembly tests: the real engine (the session `engine` of tests/conftest.py), real Redis,
helpers to build groups. `build` makes assemblers on the store of `store_kind`, which runs every
contract test twice in one run: on the in-process store and on Redis (the shared 127.0.0.1:6379
when it answers, with a key prefix of the test's own, else a private redis-server)."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis
from conftest import loopback

from reweighter.assembly import GroupAssembler, MemberSubmission, make_store
from reweighter.engine import ReweightEngine
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


@pytest.fixture
async def build(engine: ReweightEngine, store_settings: dict[str, Any]) -> AsyncIterator[Build]:
    """`build(engine=..., claim_ttl_s=..., **settings)`: an assembler on this test's store; with
    Redis, every assembler built shares it (replicas). All are closed after the test."""
    made: list[GroupAssembler] = []

    def make(eng: Any = None, claim_ttl_s: float | None = None, **overrides: Any) -> GroupAssembler:
        s = settings(**{**store_settings, **overrides})
        kw = {} if claim_ttl_s is None else {"claim_ttl_s": claim_ttl_s}
        asm = GroupAssembler(eng or engine, make_store(s), s, **kw)
        made.append(asm)
        return asm

    yield make
    for asm in made:
        await asm.aclose()


@pytest.fixture
async def assembler(build: Build) -> GroupAssembler:
    return build()


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
