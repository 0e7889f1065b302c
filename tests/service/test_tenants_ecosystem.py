"""Issue 39's routes with issue 38's tenants: the `openai` SDK authenticates with a tenant's
key as it sends any key (an unknown one is its AuthenticationError), and the diversity data
(`GET /v1/dashboard`) is per tenant: each job sees its own steps only."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from conftest import loopback, no_retry

from reweighter.client import ReweighterClient
from reweighter.engine import ReweightEngine
from reweighter.engine.board import DiversityBoard
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest

KEYS = {"job-a": "key-job-a-0001", "job-b": "key-job-b-0002"}


@pytest.fixture(scope="module")
def svc(engine: ReweightEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    path = tmp_path_factory.mktemp("tenants") / "tenants.json"
    tenants = [{"name": name, "key": key} for name, key in KEYS.items()]
    path.write_text(json.dumps({"tenants": tenants}))
    engine.board = DiversityBoard(50)
    with BackgroundService(loopback(tenants=str(path)), engine) as s:
        yield s


def test_the_sdk_with_a_tenants_key(svc: BackgroundService) -> None:
    with openai.OpenAI(base_url=f"{svc.http_url}/v1", api_key=KEYS["job-a"], max_retries=0) as c:
        out = c.embeddings.create(input=["a", "b"], model="all-MiniLM-L6-v2")
        assert len(out.data) == 2 and len(out.data[0].embedding) == 384
    stranger = openai.OpenAI(base_url=f"{svc.http_url}/v1", api_key="not-a-key", max_retries=0)
    with stranger, pytest.raises(openai.AuthenticationError):
        stranger.embeddings.create(input="a", model="all-MiniLM-L6-v2")


def test_each_job_sees_its_own_steps(svc: BackgroundService) -> None:
    group = Group(rewards=[1.0, 0.0], completions=["It is 4.", "It is 5."], answers=["4", "5"])
    for name, steps in (("job-a", [1, 2, 3]), ("job-b", [7])):
        with ReweighterClient(svc.http_url, api_key=KEYS[name], retry=no_retry()) as client:
            for step in steps:
                client.reweight(ReweightRequest(groups=[group], method="mmr", step=step))
    for name, steps in (("job-a", [1, 2, 3]), ("job-b", [7])):
        auth = {"authorization": f"Bearer {KEYS[name]}"}
        data = httpx.get(f"{svc.http_url}/v1/dashboard", headers=auth).json()
        assert data["job"] == name and [s["step"] for s in data["steps"]] == steps
    assert httpx.get(f"{svc.http_url}/v1/dashboard").status_code == 401
