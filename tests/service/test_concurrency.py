"""32 concurrent clients (HTTP and gRPC, sync and async) each get their own correct answer,
although the service merges their texts into shared encoder batches."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from reweighter.client import (
    AsyncGrpcReweighterClient,
    AsyncReweighterClient,
    GrpcReweighterClient,
    ReweighterClient,
)
from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest, ReweightResult

TOPICS = ["cats", "prime numbers", "rivers", "the moon", "chess", "bread", "volcanoes", "jazz"]


def _request(i: int) -> ReweightRequest:
    """Client i's own group: distinct texts, rewards and method, so a mix-up cannot pass."""
    topic = TOPICS[i % len(TOPICS)]
    texts = [
        f"Client {i} writes about {topic}: the first point is {i * 7 % 13}.",
        f"Client {i} writes about {topic}: the first point is {i * 7 % 13}!",
        f"An unrelated remark number {i} on the weather in city {i % 5}.",
        f"Client {i} proves that {i} + {i} = {2 * i}.",
    ]
    rewards = [1.0, float(i % 2), 0.5, 1.0]
    method = ("dra", "mmr", "none")[i % 3]
    return ReweightRequest(
        groups=[Group(rewards=rewards, completions=texts, id=f"client-{i}")],
        method=method,
        advantages="grpo",
    )


def _check(i: int, got: ReweightResult, engine: ReweightEngine) -> None:
    want = engine.reweight(_request(i))
    assert got.groups[0].id == f"client-{i}"
    assert got.method == want.method
    assert got.groups[0].rewards == pytest.approx(want.groups[0].rewards, abs=1e-4)
    assert got.groups[0].advantages == pytest.approx(want.groups[0].advantages, abs=1e-3)
    assert got.groups[0].stats.mean_similarity == pytest.approx(
        want.groups[0].stats.mean_similarity, abs=1e-4
    )


def test_32_threads_with_their_own_clients(service: BackgroundService, engine: ReweightEngine):
    def call(i: int) -> ReweightResult:
        client_cls = ReweighterClient if i % 2 else GrpcReweighterClient
        target = service.http_url if i % 2 else service.grpc_target
        with client_cls(target) as client:
            return client.reweight(_request(i))

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(call, range(32)))
    for i, got in enumerate(results):
        _check(i, got, engine)


async def test_32_concurrent_async_calls(service: BackgroundService, engine: ReweightEngine):
    async with (
        AsyncReweighterClient(service.http_url) as http,
        AsyncGrpcReweighterClient(service.grpc_target) as grpc_client,
    ):
        offset = 100  # other texts than the threaded test, so nothing comes from the cache
        results = await asyncio.gather(
            *[(http if i % 2 else grpc_client).reweight(_request(offset + i)) for i in range(32)]
        )
    for i, got in enumerate(results):
        _check(offset + i, got, engine)
