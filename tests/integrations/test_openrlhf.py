"""OpenRLHF endpoint on a live loopback server, called by OpenRLHF's own client code.

The client is the real `openrlhf` 0.11.2 package (installed with --no-deps): its single-turn
executor `SingleTurnAgentExecutor(remote_rm_url).execute(...)` generates, decodes prompt +
response, posts to `--remote_rm_url` with its own aiohttp code and reads rewards/scores/
extra_logs. Only the vLLM engine it generates with is a fake (no vLLM here); it speaks vLLM's
`generate(prompt_token_ids, sampling_params, multi_modal_data=None)` -> RequestOutput shape.
The main endpoint is the service itself (`BackgroundService`: `create_app` mounts the router);
routers with other verifiers and timeouts are mounted on the service's app for their tests.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import uvicorn

pytest.importorskip("openrlhf.utils.agent")

from openrlhf.utils.agent import SingleTurnAgentExecutor  # noqa: E402

from reweighter.api.http.app import create_app  # noqa: E402
from reweighter.api.http.openrlhf import build_openrlhf_router  # noqa: E402
from reweighter.api.metrics import Metrics  # noqa: E402
from reweighter.assembly import GroupAssembler, make_store  # noqa: E402
from reweighter.config import OpenRLHFSettings  # noqa: E402
from reweighter.verify import response_of  # noqa: E402
from reweighter.verify.math_answers import answers_match, final_answer  # noqa: E402
from reweighter.verify.upstream import UpstreamVerifier  # noqa: E402
from reweighter.service import BackgroundService  # noqa: E402
from reweighter.types import Group, ReweightRequest  # noqa: E402

from .conftest import free_port, loopback  # noqa: E402


class Served:
    """A FastAPI app on uvicorn in a background thread, on a free loopback port."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def upstream_app() -> Any:
    """Another OpenRLHF-protocol reward server: 1.0 when the label appears in the query."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/score")
    async def score(body: dict) -> dict:
        pairs = zip(body["query"], body["labels"], strict=True)
        r = [1.0 if str(lab) in q else 0.0 for q, lab in pairs]
        return {"rewards": r, "scores": r, "extra_logs": {}}

    return app


@pytest.fixture(scope="module")
def upstream() -> Iterator[Served]:
    with Served(upstream_app()) as s:
        yield s


@pytest.fixture(scope="module")
def server(engine: Any, upstream: Served) -> Iterator[Served]:
    """The service's HTTP app (with its own /v1/openrlhf/reward) plus two more routers: a
    short timeout, and the upstream verifier."""
    settings = loopback(assembly_timeout_s=60.0)
    assembler = GroupAssembler(engine, make_store(settings), settings)
    app = create_app(engine, settings, assembler=assembler)
    app.include_router(build_openrlhf_router(
        OpenRLHFSettings(n=4, timeout_s=1.0), Metrics(engine), assembler, paths=("/short",)))
    app.include_router(build_openrlhf_router(
        OpenRLHFSettings(), Metrics(engine), assembler,
        verifier=UpstreamVerifier(upstream.url("/score")), paths=("/upstream",)))
    with Served(app) as s:
        yield s


class FakeVLLM:
    """vLLM's AsyncLLM.generate shape: returns a RequestOutput-like object for one prompt."""

    def __init__(self, tokenizer: Any, responses: dict[tuple[int, ...], list[str]]) -> None:
        self.tokenizer = tokenizer
        self.responses = responses

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any,
                       multi_modal_data: Any = None) -> Any:
        text = self.responses[tuple(prompt_token_ids)].pop()
        ids = self.tokenizer(" " + text, add_special_tokens=False)["input_ids"]
        out = SimpleNamespace(token_ids=ids, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


WAYS = ["the answer is {a}", "adding up we get {a}", "so it is {b}", "carry the one to get {a}",
        "i estimate {b}", "counting gives {a}"]


def problems(k: int, n: int, seed: int, tokenizer: Any) -> list[tuple[str, str, str]]:
    """(prompt, label, response) for k prompts x n responses, shuffled."""
    rng = random.Random(seed)
    rows = []
    for p in range(k):
        x, y = 3 + p, 4 + seed
        prompt = f"compute {x} plus {y} round {seed}"
        for j in range(n):
            rows.append((prompt, str(x + y),
                         f"case {j} " + WAYS[(p + j) % len(WAYS)].format(a=x + y, b=x + y + 1)))
    rng.shuffle(rows)
    return rows


async def run_openrlhf(url: str, rows: list[tuple[str, str, str]], tokenizer: Any) -> list[dict]:
    """OpenRLHF's executor on every row at once, as its rollout workers do."""
    responses: dict[tuple[int, ...], list[str]] = {}
    for prompt, _, response in reversed(rows):
        ids = tuple(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        responses.setdefault(ids, []).append(response)
    engine = FakeVLLM(tokenizer, responses)
    executor = SingleTurnAgentExecutor(remote_rm_url=url)
    params = SimpleNamespace(max_tokens=64, logprobs=None)
    return await asyncio.gather(*(
        executor.execute(prompt, label, params, 256, tokenizer, engine)
        for prompt, label, _ in rows
    ))


def expected(engine: Any, outs: list[dict], tokenizer: Any) -> list[float]:
    """/v1/reweight semantics per prompt group, on the completions the endpoint saw."""
    queries = [tokenizer.decode(o["observation_tokens"], skip_special_tokens=False) for o in outs]
    texts = [response_of(q, o["prompt"]) for q, o in zip(queries, outs, strict=True)]
    raw = [1.0 if answers_match(final_answer(t), o["label"]) else 0.0
           for t, o in zip(texts, outs, strict=True)]
    want = [0.0] * len(outs)
    for prompt in {o["prompt"] for o in outs}:
        idx = [i for i, o in enumerate(outs) if o["prompt"] == prompt]
        res = engine.reweight(ReweightRequest(groups=[
            Group(rewards=[raw[i] for i in idx], completions=[texts[i] for i in idx])]))
        for i, r in zip(idx, res.groups[0].rewards, strict=True):
            want[i] = r
    return want


async def test_openrlhf_client_gets_group_reweighted_rewards(service, engine, tokenizer) -> None:
    url = f"{service.http_url}/v1/openrlhf/reward?n=6"  # the service as deployed
    rows = problems(k=4, n=6, seed=0, tokenizer=tokenizer)
    outs = await run_openrlhf(url, rows, tokenizer)
    want = expected(engine, outs, tokenizer)
    for o, w in zip(outs, want, strict=True):
        assert o["reward"] is not None, "OpenRLHF's client got no reward"
        assert o["reward"] == [pytest.approx(w, abs=1e-6)]
        assert o["extra_logs"]["reweighted"] == [1.0]
    raw = [o["scores"][0] for o in outs]
    assert set(raw) == {0.0, 1.0}  # the math checker scored both ways
    assert any(o["reward"][0] != o["scores"][0] for o in outs)

    # The same prompts come back next epoch with new completions: new groups, complete again.
    again = [(p, lab, r + " indeed") for p, lab, r in rows]
    outs2 = await run_openrlhf(url, again, tokenizer)
    assert all(o["extra_logs"]["reweighted"] == [1.0] for o in outs2)
    assert [o["reward"][0] for o in outs2] == pytest.approx(
        expected(engine, outs2, tokenizer), abs=1e-6)


async def test_retry_is_the_same_member(server, tokenizer) -> None:
    rows = problems(k=1, n=3, seed=5, tokenizer=tokenizer)
    url = server.url("/v1/openrlhf/reward?n=3")
    outs = await run_openrlhf(url, rows, tokenizer)
    q = tokenizer.decode(outs[0]["observation_tokens"], skip_special_tokens=False)
    body = {"query": [q], "prompts": [outs[0]["prompt"]], "labels": [outs[0]["label"]]}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(url, json=body)  # OpenRLHF re-posting after a lost answer
    assert r.status_code == 200
    assert r.json()["rewards"] == [pytest.approx(outs[0]["reward"][0], abs=1e-9)]


async def test_short_group_times_out_to_raw_reward(server, tokenizer) -> None:
    rows = problems(k=1, n=2, seed=7, tokenizer=tokenizer)  # 2 of the router's n=4
    outs = await run_openrlhf(server.url("/short"), rows, tokenizer)
    for o in outs:
        assert o["extra_logs"]["reweighted"] == [0.0]
        assert o["reward"] == o["scores"]


async def test_upstream_verifier(server, engine, tokenizer) -> None:
    rows = problems(k=2, n=3, seed=9, tokenizer=tokenizer)
    outs = await run_openrlhf(server.url("/upstream?n=3"), rows, tokenizer)
    for o in outs:
        q = tokenizer.decode(o["observation_tokens"], skip_special_tokens=False)
        assert o["scores"] == [1.0 if o["label"] in q else 0.0]  # the upstream's reward
        assert o["extra_logs"]["reweighted"] == [1.0]


async def test_bad_requests_name_the_field(server) -> None:
    async with httpx.AsyncClient(timeout=10) as c:
        r = await c.post(server.url("/v1/openrlhf/reward"),
                         json={"query": ["a"], "prompts": ["p"], "labels": ["1"]})
        assert r.status_code == 422 and r.json()["error"]["field"] == "n"
        r = await c.post(server.url("/v1/openrlhf/reward?n=2"),
                         json={"query": ["a", "b"], "prompts": ["p"], "labels": ["1", "2"]})
        assert r.status_code == 422 and r.json()["error"]["field"] == "prompts"


def test_math_checker() -> None:
    m, x = answers_match, final_answer
    assert m(x("so \\boxed{\\frac{1}{2}}"), "0.5")
    assert m(x("#### 1,234"), "1234")
    assert m(x("The answer is 7."), "7")
    assert not m(x("The answer is 8."), "7")
    assert m(x("we get \\boxed{x+1}"), "x + 1")
    assert not m(x("no numbers here"), "3")


async def test_service_endpoint_uses_the_service_key_and_settings(engine, tokenizer) -> None:
    """The service's own mount: its API key, and --openrlhf-n when the URL has no ?n=."""
    rows = problems(k=1, n=2, seed=13, tokenizer=tokenizer)
    body = {"query": [p + " " + r for p, _, r in rows], "prompts": [p for p, _, _ in rows],
            "labels": [lab for _, lab, _ in rows]}
    with BackgroundService(loopback(api_key="s3cret", openrlhf_n=2), engine) as svc:
        url = f"{svc.http_url}/v1/openrlhf/reward"
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(url, json=body)
            assert r.status_code == 401
            r = await c.post(url, json=body, headers={"authorization": "Bearer s3cret"})
    assert r.status_code == 200, r.text
    assert r.json()["extra_logs"]["reweighted"] == [1.0, 1.0]  # n=2 from the settings
