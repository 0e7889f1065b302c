"""Redis as a shared cache between service instances, and never a point of failure."""

from __future__ import annotations

import uuid

import httpx
import pytest

from reweighter.client import GrpcReweighterClient, ReweighterClient
from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest

from .conftest import loopback


def metric(url: str, name: str) -> float:
    """One unlabelled sample from the instance's own /metrics."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def _unique_group(tag: str) -> Group:
    """Texts no other test (or engineer sharing this Redis) has embedded."""
    u = uuid.uuid4().hex
    texts = [f"{tag} {u}: the answer is 42.", f"{tag} {u}: we get 41.", f"{tag} {u}, differently."]
    return Group(rewards=[1.0, 0.0, 1.0], completions=texts)


def _instance(redis_url: str) -> BackgroundService:
    """A service with its own engine (own model, own in-process LRU) on the given Redis."""
    settings = loopback(redis_url=redis_url)
    engine = ReweightEngine(settings)
    engine.load()
    return BackgroundService(settings, engine).start()


def test_second_instance_serves_a_repeat_from_redis(shared_redis_url: str) -> None:
    first, second = _instance(shared_redis_url), _instance(shared_redis_url)
    try:
        request = ReweightRequest(groups=[_unique_group("shared")], method="dra")
        with ReweighterClient(first.http_url) as client:
            from_first = client.reweight(request)
        hits = metric(second.http_url, "reweighter_cache_hits_total")
        encoded = metric(second.http_url, "reweighter_texts_encoded_total")

        with GrpcReweighterClient(second.grpc_target) as client:
            from_second = client.reweight(request)

        assert metric(second.http_url, "reweighter_cache_hits_total") == hits + 3
        assert metric(second.http_url, "reweighter_texts_encoded_total") == encoded  # no model
        # the vectors came through Redis as float32: the same answer
        assert from_second.groups[0].rewards == pytest.approx(
            from_first.groups[0].rewards, abs=1e-6
        )
        # two instances in one process keep separate registries
        assert metric(first.http_url, "reweighter_cache_hits_total") == 0
        assert metric(first.http_url, "reweighter_texts_encoded_total") == 3
    finally:
        first.stop()
        second.stop()


def test_requests_succeed_while_redis_is_down(redis_server, engine: ReweightEngine) -> None:
    svc = _instance(redis_server.url)
    try:
        with ReweighterClient(svc.http_url) as http, GrpcReweighterClient(svc.grpc_target) as rpc:
            warm = ReweightRequest(groups=[_unique_group("before")], method="mmr")
            assert len(http.reweight(warm).groups[0].rewards) == 3
            assert metric(svc.http_url, "reweighter_redis_errors_total") == 0

            redis_server.stop()
            for client in (http, rpc):
                request = ReweightRequest(
                    groups=[_unique_group("during")], method="dra", advantages="grpo"
                )
                got = client.reweight(request)
                want = engine.reweight(request)  # the in-process answer, no Redis involved
                assert got.groups[0].rewards == pytest.approx(want.groups[0].rewards, abs=1e-4)
                assert got.groups[0].advantages == pytest.approx(
                    want.groups[0].advantages, abs=1e-3
                )
            # a repeat is still served (from the in-process LRU in front of Redis)
            assert http.reweight(warm).groups[0].rewards == pytest.approx(
                rpc.reweight(warm).groups[0].rewards, abs=0
            )
        assert metric(svc.http_url, "reweighter_redis_errors_total") > 0
        assert httpx.get(f"{svc.http_url}/readyz").status_code == 200
    finally:
        svc.stop()
