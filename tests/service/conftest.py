"""Real services on loopback: uvicorn + grpc.aio on one event loop in a background thread.

The model loads once per session (`engine`); services built over it are cheap, so modules start
their own with the settings they need (API key, small limits) and stop them at module end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reweighter.client import GrpcReweighterClient, RetryPolicy, ReweighterClient
from reweighter.config import Settings
from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService

NO_RETRY = RetryPolicy(retries=0)


def loopback(**overrides: object) -> Settings:
    """Settings for a test service: loopback, free ports, no Redis unless asked."""
    base: dict[str, object] = {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0}
    base.update(overrides)
    return Settings(**base)


@pytest.fixture(scope="session")
def engine() -> ReweightEngine:
    """The real engine on the bundled all-MiniLM-L6-v2, loaded once for the whole session."""
    eng = ReweightEngine(loopback())
    eng.load()
    return eng


@pytest.fixture(scope="module")
def service(engine: ReweightEngine) -> Iterator[BackgroundService]:
    with BackgroundService(loopback(), engine) as svc:
        yield svc


@pytest.fixture(scope="module")
def http(service: BackgroundService) -> Iterator[ReweighterClient]:
    with ReweighterClient(service.http_url, retry=NO_RETRY) as client:
        yield client


@pytest.fixture(scope="module")
def grpc_client(service: BackgroundService) -> Iterator[GrpcReweighterClient]:
    with GrpcReweighterClient(service.grpc_target, retry=NO_RETRY) as client:
        yield client
