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
import io
import json
import logging
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import uvicorn
import uvicorn.logging
from prometheus_client import generate_latest

pytest.importorskip("openrlhf.utils.agent")

from conftest import ServedApp  # noqa: E402
from openrlhf.utils.agent import SingleTurnAgentExecutor  # noqa: E402

from reweighter.api.http.app import create_app  # noqa: E402
from reweighter.api.http.openrlhf import build_openrlhf_router, is_token_path  # noqa: E402
from reweighter.api.metrics import Metrics  # noqa: E402
from reweighter.assembly import GroupAssembler, make_store  # noqa: E402
from reweighter.assembly.openrlhf import Left, MemoryRounds, RedisRounds, Rounds  # noqa: E402
from reweighter.config import OpenRLHFSettings  # noqa: E402
from reweighter.logs import RedactFilter  # noqa: E402
from reweighter.service import BackgroundService  # noqa: E402
from reweighter.types import Group, ReweightRequest  # noqa: E402
from reweighter.verify import response_of  # noqa: E402
from reweighter.verify.math_answers import (  # noqa: E402
    answers_match,
    final_answer,
    label_answer,
)
from reweighter.verify.upstream import UpstreamVerifier  # noqa: E402

from .conftest import free_port, loopback  # noqa: E402


def upstream_app() -> Any:
    """Another OpenRLHF-protocol reward server: 1.0 when the label appears in the query."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/score")
    async def score(body: dict) -> dict:
        pairs = zip(body["query"], body["labels"], strict=True)
        r = [1.0 if str(lab) in q else 0.0 for q, lab in pairs]
        return {"rewards": r, "scores": r, "extra_logs": {}}

    @app.post("/score_quality")
    async def score_quality(body: dict) -> dict:
        """Accuracy plus a format bonus (0.5 when the response says "answer is"), and which
        part is quality: the accuracy, in extra_logs.quality."""
        pairs = zip(body["query"], body["labels"], strict=True)
        acc = [1.0 if str(lab) in q.rsplit(" ", 1)[-1] else 0.0 for q, lab in pairs]
        fmt = [0.5 if "answer is" in q else 0.0 for q in body["query"]]
        r = [a + f for a, f in zip(acc, fmt, strict=True)]
        return {"rewards": r, "scores": r, "extra_logs": {"quality": acc}}

    return app


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServedApp]:
    with ServedApp(upstream_app()) as s:
        yield s


@pytest.fixture(scope="module")
def server(engine: Any, upstream: ServedApp) -> Iterator[ServedApp]:
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
    app.include_router(build_openrlhf_router(
        OpenRLHFSettings(), Metrics(engine), assembler,
        verifier=UpstreamVerifier(upstream.url("/score_quality")), paths=("/quality",)))
    late = Metrics(engine)  # a late surplus within seconds: siblings join within 0.5 s
    app.include_router(build_openrlhf_router(
        OpenRLHFSettings(timeout_s=30.0), late, assembler, paths=("/late",), late_s=0.5))
    app.include_router(build_openrlhf_router(  # an upstream that is down, with credentials
        OpenRLHFSettings(), Metrics(engine), assembler, verifier=UpstreamVerifier(
            f"http://user:pw-secret@127.0.0.1:{free_port()}/score"), paths=("/down",)))
    with ServedApp(app) as s:
        s.late_metrics = late  # type: ignore[attr-defined]
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


def expected(
    engine: Any, outs: list[dict], tokenizer: Any, method: str = "dra", **params: Any
) -> list[float]:
    """/v1/reweight semantics per prompt group, on the completions the endpoint saw."""
    queries = [tokenizer.decode(o["observation_tokens"], skip_special_tokens=False) for o in outs]
    texts = [response_of(q, o["prompt"]) for q, o in zip(queries, outs, strict=True)]
    raw = [1.0 if answers_match(final_answer(t), o["label"]) else 0.0
           for t, o in zip(texts, outs, strict=True)]
    want = [0.0] * len(outs)
    for prompt in {o["prompt"] for o in outs}:
        idx = [i for i, o in enumerate(outs) if o["prompt"] == prompt]
        res = engine.reweight(ReweightRequest(groups=[
            Group(rewards=[raw[i] for i in idx], completions=[texts[i] for i in idx])],
            method=method, params=params))
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


async def test_an_upstreams_quality_is_the_part_reweighted(server, engine, tokenizer) -> None:
    """Issue 49: OpenRLHF's request has no place for quality, but an upstream reward server's
    answer does (`extra_logs.quality`, one number per query): the route sends it as each
    member's quality, so the method scales only the accuracy and adds the format bonus back,
    as /v1/reweight does with `quality`; not the whole reward."""
    rows = [(p, lab, r) for p, lab, r in problems(k=1, n=6, seed=17, tokenizer=tokenizer)]
    outs = await run_openrlhf(server.url("/quality?n=6"), rows, tokenizer)
    queries = [tokenizer.decode(o["observation_tokens"], skip_special_tokens=False) for o in outs]
    texts = [response_of(q, o["prompt"]) for q, o in zip(queries, outs, strict=True)]
    raw = [o["scores"][0] for o in outs]
    acc = [1.0 if o["label"] in q.rsplit(" ", 1)[-1] else 0.0
           for q, o in zip(queries, outs, strict=True)]  # fmt: skip
    assert sorted(set(raw)) != sorted(set(acc))  # a format bonus in the reward
    assert all(o["extra_logs"]["reweighted"] == [1.0] for o in outs)
    with_quality = engine.reweight(ReweightRequest(
        groups=[Group(rewards=raw, completions=texts, quality=acc)])).groups[0].rewards
    whole = engine.reweight(ReweightRequest(
        groups=[Group(rewards=raw, completions=texts)])).groups[0].rewards
    got = [o["reward"][0] for o in outs]
    assert got == pytest.approx(list(with_quality), abs=1e-6)
    assert got != pytest.approx(list(whole), abs=1e-6)


async def test_upstream_down_is_a_502_without_its_credentials(server) -> None:
    body = {"query": ["q 1"], "prompts": ["q"], "labels": ["1"]}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url("/down?n=2"), json=body)
    assert r.status_code == 502, r.text  # OpenRLHF retries it
    assert "upstream reward server" in r.json()["error"]["message"]
    assert "pw-secret" not in r.text


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
    # a LaTeX fraction after a marker or as the last number is the whole fraction
    assert x("Answer: \\dfrac{1}{2}") == "\\dfrac{1}{2}" and m(x("Answer: \\dfrac{1}{2}"), "0.5")
    assert m(x("so x = -\\frac{3}{4}"), "-0.75") and not m(x("so x = \\frac{3}{4}"), "4")
    # a worked-solution label (GSM8K's answer column) counts by its final answer; a symbolic
    # label is the answer itself
    assert label_answer("48/2 = 24 in May, 24 + 48 = 72\n#### 72") == "72"
    assert label_answer("x + 1") == "x + 1" and label_answer(7) == 7


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


# -- authentication: OpenRLHF's client sends no headers ----------------------------------------

TOKEN = "Zq3-openrlhf-route-secret_9Xv"
KEY = "the-service-api-key"


@pytest.fixture(scope="module")
def keyed(engine: Any) -> Iterator[tuple[BackgroundService, io.StringIO, io.StringIO]]:
    """The service with an API key and an OpenRLHF token, a 2 s OpenRLHF timeout, and its
    access log on (--log-level debug) through uvicorn's own access formatter and the service's
    redaction filter (reweighter.logs, as `reweighter serve` installs it); the service's other
    log lines go to a second stream through the same filter."""
    access, other = io.StringIO(), io.StringIO()
    handlers = {
        "uvicorn.access": logging.StreamHandler(access),
        "reweighter": logging.StreamHandler(other),
    }
    handlers["uvicorn.access"].setFormatter(uvicorn.logging.AccessFormatter(
        '%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False))
    for name, handler in handlers.items():
        handler.addFilter(RedactFilter())
        logging.getLogger(name).addHandler(handler)
    settings = loopback(api_key=KEY, openrlhf_token=TOKEN, openrlhf_timeout_s=2.0,
                        log_level="debug")
    try:
        with BackgroundService(settings, engine) as svc:
            yield svc, access, other
    finally:
        for name, handler in handlers.items():
            logging.getLogger(name).removeHandler(handler)


async def test_token_route_gets_real_rewards_through_openrlhfs_client(keyed, engine,
                                                                       tokenizer) -> None:
    svc, access, other = keyed
    url = f"{svc.http_url}/v1/openrlhf/{TOKEN}/reward?n=3"  # as docs/integrations.md gives it
    outs = await run_openrlhf(url, problems(k=2, n=3, seed=21, tokenizer=tokenizer), tokenizer)
    want = expected(engine, outs, tokenizer)
    for o, w in zip(outs, want, strict=True):
        assert o["reward"] == [pytest.approx(w, abs=1e-6)]
        assert o["extra_logs"]["reweighted"] == [1.0]

    body = {"query": ["q 1"], "prompts": ["q"], "labels": ["1"]}
    async with httpx.AsyncClient(timeout=10) as c:
        for path, headers in [
            (f"/v1/openrlhf/{TOKEN}x/reward?n=1", {}),  # wrong token
            (f"/v1/openrlhf/{TOKEN[:-1]}/reward?n=1", {}),  # a prefix of it
            ("/v1/openrlhf/reward?n=1", {}),  # no token, no key
            ("/v1/openrlhf//reward?n=1", {}),  # empty token
            (f"/v1/openrlhf/{KEY}/reward?n=1", {}),  # the API key is not the token
            ("/v1/openrlhf/x/reward?n=1", {"authorization": f"Bearer {KEY}"}),
        ]:
            r = await c.post(svc.http_url + path, json=body, headers=headers)
            assert r.status_code == 401, (path, r.text)
            assert TOKEN not in r.text
        # the key-holding route still works with the key, and the token route with the token
        r = await c.post(f"{svc.http_url}/v1/openrlhf/reward?n=1", json=body,
                         headers={"authorization": f"Bearer {KEY}"})
        assert r.status_code == 200, r.text
        r = await c.post(f"{svc.http_url}/v1/openrlhf/{TOKEN}/reward?n=1", json=body)
        assert r.status_code == 200 and r.json()["rewards"] == [1.0]
        metrics = (await c.get(f"{svc.http_url}/metrics")).text

    # never logged, never a metric label; the access log shows the route with *** for it
    logged = access.getvalue() + other.getvalue()
    assert "/v1/openrlhf/***/reward?n=3" in access.getvalue()
    assert TOKEN not in logged and TOKEN[:-1] not in logged
    assert TOKEN not in metrics and TOKEN[:-1] not in metrics
    assert 'endpoint="openrlhf"' in metrics


def test_token_route_without_a_token_configured_is_closed() -> None:
    from reweighter.errors import Unauthenticated

    assert not is_token_path("/v1/openrlhf/reward", None)
    assert not is_token_path("/v1/reweight", "t")
    with pytest.raises(Unauthenticated):
        is_token_path("/v1/openrlhf/anything/reward", None)
    with pytest.raises(Unauthenticated):
        is_token_path("/v1/openrlhf/anything/reward", "")
    assert is_token_path("/v1/openrlhf/t0k/reward", "t0k")


# -- rounds: the same prompt comes back; a wrong ?n= ---------------------------------------------


def _round(seed: int, n: int, suffix: str, tokenizer: Any) -> list[tuple[str, str, str]]:
    rows = problems(k=1, n=n, seed=seed, tokenizer=tokenizer)
    return [(p, lab, r + suffix) for p, lab, r in rows]


def _short_rounds(metrics: str, cause: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f'reweighter_openrlhf_short_rounds_total{{cause="{cause}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"no short-rounds counter for {cause}:\n{metrics}")


@pytest.mark.parametrize("declared, sent", [(3, 4), (5, 4)])
async def test_wrong_n_never_mixes_rounds_and_is_reported(keyed, engine, tokenizer, declared,
                                                          sent, caplog) -> None:
    """`?n=` differs from the samples OpenRLHF sends per prompt; the same prompt comes back
    in a second round with new completions. Every reweighted number is computed over samples
    of one round only; every sample answered short says so in extra_logs; the service warns
    and counts it."""
    svc, _, _ = keyed
    url = f"{svc.http_url}/v1/openrlhf/{TOKEN}/reward?n={declared}"
    cause = "surplus" if sent > declared else "short"
    async with httpx.AsyncClient(timeout=10) as c:
        before = _short_rounds((await c.get(f"{svc.http_url}/metrics")).text, cause)
    caplog.set_level(logging.WARNING, logger="reweighter")
    for step, suffix in enumerate(["", " on second thought"]):
        rows = _round(40 + declared, sent, suffix, tokenizer)
        outs = await run_openrlhf(url, rows, tokenizer)
        whole = [o for o in outs if o["extra_logs"]["reweighted"] == [1.0]]
        short = [o for o in outs if o["extra_logs"]["short_round"] == [1.0]]
        # a surplus shows n is wrong: the second step is raw (wrong_n) on that route
        assert len(whole) == (declared if sent > declared and step == 0 else 0), step
        assert len(whole) + len(short) == sent
        for o in short:  # answered with its raw reward, flagged
            assert o["reward"] == o["scores"]
        if whole:  # the group is exactly this round's samples that completed
            want = expected(engine, whole, tokenizer)
            assert [o["reward"][0] for o in whole] == pytest.approx(want, abs=1e-6)
            texts = [tokenizer.decode(o["observation_tokens"]) for o in whole]
            assert all(t.endswith(suffix.strip()) for t in texts) or not suffix
    async with httpx.AsyncClient(timeout=10) as c:
        after = _short_rounds((await c.get(f"{svc.http_url}/metrics")).text, cause)
    assert after - before == (1 if sent > declared else 2)  # a short round per step, or the
    # surplus of the first (the second step is answered raw as wrong_n, said once)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                and r.name.startswith("reweighter.api.http.openrlhf")]
    assert len(warnings) == 2, warnings
    hint = f"n_samples_per_prompt = {sent}" if sent > declared else f"{sent} of n={declared}"
    assert any(hint in w for w in warnings), warnings
    assert all("--rollout.n_samples_per_prompt" in w for w in warnings), warnings


def _check_pass(outs: list[dict], engine: Any, tokenizer: Any, suffix: str, n: int) -> None:
    """Every reweighted answer is of a group of exactly n samples of this pass (what
    /v1/reweight gives on them); every other answer is the raw reward, flagged short and
    surplus or wrong_n."""
    for prompt in {o["prompt"] for o in outs}:
        mine = [o for o in outs if o["prompt"] == prompt]
        whole = [o for o in mine if o["extra_logs"]["reweighted"] == [1.0]]
        assert len(whole) in (0, n), prompt
        if whole:
            texts = [tokenizer.decode(o["observation_tokens"]) for o in whole]
            assert all(t.endswith(suffix.strip()) for t in texts), texts
            want = expected(engine, whole, tokenizer)  # the group of exactly these n
            assert [o["reward"][0] for o in whole] == pytest.approx(want, abs=1e-6)
        for o in mine:
            if o["extra_logs"]["reweighted"] == [0.0]:
                assert o["reward"] == o["scores"] and o["extra_logs"]["short_round"] == [1.0]
                assert o["extra_logs"]["surplus"] != o["extra_logs"]["wrong_n"], o["extra_logs"]


async def test_a_surplus_never_seeds_a_round_and_turns_the_route_raw(
    service, engine, tokenizer
) -> None:
    """`?n=7` with 8 samples a prompt, then the same prompts again with new completions: the
    sample beyond n is answered at once with its raw reward, flagged `surplus`; it shows n is
    wrong, so every later sample of the route is raw, flagged `wrong_n`; no reweighted number
    is computed over samples of two passes. `?n=8` (the URL changed) reweights again."""
    url = f"{service.http_url}/v1/openrlhf/reward?n=7"
    flags: list[list[float]] = []
    for step, suffix in enumerate([" first pass", " second pass"]):
        rows = [(p, lab, r + suffix) for p, lab, r in
                problems(k=8, n=8, seed=60, tokenizer=tokenizer)]  # fmt: skip
        random.Random(step).shuffle(rows)
        outs = await run_openrlhf(url, rows, tokenizer)
        _check_pass(outs, engine, tokenizer, suffix, 7)
        flags.append([o["extra_logs"]["surplus"][0] for o in outs])
        if step == 1:
            assert all(o["extra_logs"]["wrong_n"] == [1.0] for o in outs)
    assert sum(flags[0]) >= 1 and sum(flags[1]) == 0
    rows = [(p, lab, r + " fixed") for p, lab, r in
            problems(k=2, n=8, seed=60, tokenizer=tokenizer)]  # fmt: skip
    outs = await run_openrlhf(f"{service.http_url}/v1/openrlhf/reward?n=8", rows, tokenizer)
    assert all(o["extra_logs"]["reweighted"] == [1.0] for o in outs)


async def test_a_late_surplus_never_joins_the_next_step(server, engine, tokenizer, caplog) -> None:
    """The timing that mixed steps, driven on purpose: `?n=5`, five samples of a prompt are
    answered (reweighted); then its sixth arrives and waits in the next round; the next step's
    samples come after the route's late_s (0.5 s here). Joining would compute one group over
    two steps: instead the sixth and every later sample are answered raw, flagged `wrong_n`,
    logged once and counted. `?n=6` (the URL changed) reweights again."""
    url = server.url("/late?n=5")
    rows = problems(k=1, n=6, seed=64, tokenizer=tokenizer)
    caplog.set_level(logging.WARNING, logger="reweighter")
    first = await run_openrlhf(url, rows[:5], tokenizer)
    assert all(o["extra_logs"]["reweighted"] == [1.0] for o in first)
    sixth = asyncio.ensure_future(run_openrlhf(url, rows[5:], tokenizer))
    await asyncio.sleep(1.0)
    assert not sixth.done()  # it waits in a round of its own
    nxt = await run_openrlhf(url, [(p, lab, r + " next") for p, lab, r in rows], tokenizer)
    late = (await asyncio.wait_for(sixth, 10))[0]
    for o in [late, *nxt]:
        assert o["extra_logs"]["wrong_n"] == [1.0] and o["reward"] == o["scores"], o
        assert o["extra_logs"]["reweighted"] == [0.0]
    metrics = generate_latest(server.late_metrics.registry).decode()
    assert _counter(metrics, "reweighter_openrlhf_wrong_n_total") == 7
    said = [r.getMessage() for r in caplog.records if "?n=5 is wrong" in r.getMessage()]
    assert len(said) == 1 and "--rollout.n_samples_per_prompt" in said[0], said
    again = [(p, lab, r + " fixed") for p, lab, r in rows]
    outs = await run_openrlhf(server.url("/late?n=6"), again, tokenizer)
    assert all(o["extra_logs"]["reweighted"] == [1.0] for o in outs)


def _counter(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


# -- the documented command, through OpenRLHF's own parser -------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
PARSER = Path(__file__).with_name("openrlhf_parser.py")


def documented_command() -> str:
    """The bash block after the `openrlhf-command` marker in docs/integrations.md."""
    text = DOCS.read_text()
    after = text[text.index("<!-- openrlhf-command"):]
    return after.split("```bash\n", 1)[1].split("```", 1)[0]


def argv_of(command: str, **env: str) -> list[str]:
    """The arguments bash hands `python` for `command` (quotes, continuations, ${VARS})."""
    script = "python() { printf '%s\\0' \"$@\"; }\n" + command
    run = subprocess.run(["bash", "-c", script], env={**os.environ, **env},
                         capture_output=True, text=True, check=True)  # fmt: skip
    return run.stdout.split("\0")[:-1]


def openrlhf_parse(flags: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", str(PARSER), *flags], cwd=cwd,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.process
async def test_documented_command_runs_through_openrlhfs_parser(keyed, engine, tokenizer,
                                                                tmp_path) -> None:
    argv = argv_of(documented_command(), REWEIGHTER_OPENRLHF_TOKEN=TOKEN)
    assert argv[:2] == ["-m", "openrlhf.cli.train_ppo_ray"]
    run = openrlhf_parse(argv[2:], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    args = json.loads(run.stdout.strip().splitlines()[-1])
    (url,) = args["reward"]["remote_url"]
    assert url == f"http://reweighter:8080/v1/openrlhf/{TOKEN}/reward?n=8&batch=128"
    n = int(parse_qs(urlsplit(url).query)["n"][0])
    assert args["rollout"]["n_samples_per_prompt"] == n  # ?n= must equal it
    assert args["rollout"]["batch_size"] == int(parse_qs(urlsplit(url).query)["batch"][0])
    assert args["data"]["label_key"] == "answer"

    # the URL it gives, on a live service: OpenRLHF's client gets reweighted rewards
    svc, _, _ = keyed
    live = url.replace("http://reweighter:8080", svc.http_url)
    outs = await run_openrlhf(live, problems(k=1, n=n, seed=77, tokenizer=tokenizer), tokenizer)
    assert [o["extra_logs"]["reweighted"] for o in outs] == [[1.0]] * n
    want = expected(engine, outs, tokenizer)
    assert [o["reward"][0] for o in outs] == pytest.approx(want, abs=1e-6)


def test_the_parser_harness_refuses_what_openrlhf_refuses(tmp_path) -> None:
    """The flags of OpenRLHF before 0.11 (what these docs gave before): exit 2, as the real
    `python -m openrlhf.cli.train_ppo_ray` exits."""
    run = openrlhf_parse(["--remote_rm_url", "http://x/reward?n=8", "--n_samples_per_prompt",
                          "8", "--label_key", "answer"], tmp_path)  # fmt: skip
    assert run.returncode == 2
    assert "unrecognized arguments: --remote_rm_url" in run.stderr


@pytest.fixture(params=["memory", "redis"])
def rounds_of(request: pytest.FixtureRequest) -> Iterator[Any]:
    """`rounds_of(clock, **knobs)`: Rounds on the store of the test's param (one state machine,
    two stores: this process's, and Redis, shared by replicas), both on a clock the test moves."""
    clients: list[Any] = []
    prefix = f"test:orlhf:{os.urandom(6).hex()}:"

    def make(clock: Any, **knobs: Any) -> Rounds:
        if request.param == "memory":
            return Rounds("t", MemoryRounds(clock=clock), **knobs)
        from reweighter.redis_client import async_client

        client = async_client(request.getfixturevalue("shared_redis_url"))
        clients.append(client)
        return Rounds("t", RedisRounds(client, prefix, clock=clock), **knobs)

    yield make
    if clients:
        import redis

        sync = redis.Redis.from_url(request.getfixturevalue("shared_redis_url"))
        keys = list(sync.scan_iter(match=f"{prefix}*"))
        assert keys, "the Redis store held nothing"
        sync.delete(*keys)


async def test_round_rules(rounds_of: Any) -> None:
    """assembly/openrlhf.py's rules, on each store, with a clock the test moves: re-posts,
    repeated completions, surplus samples, a prompt coming back, which short rounds are
    surplus, and each round's number among the job's rounds."""
    now = [0.0]
    rounds = rounds_of(lambda: now[0], retry_window_s=60.0, burst_s=150.0)
    a = await rounds.enter("p", "p a", 3)
    a2 = await rounds.enter("p", "p a", 3)
    b = await rounds.enter("p", "p b", 3)
    assert a.round == a2.round == b.round == 0
    assert a.ordinal == a2.ordinal == b.ordinal == 0  # the job's first round
    assert (await rounds.enter("q", "q a", 3)).ordinal == 1  # another prompt: the next number
    assert a2.member_id == a.member_id + ".1"  # the same text while the first waits: a copy
    assert b.group_id == a.group_id
    # a fourth sample while round 0 is full and still being answered: surplus, seated nowhere
    s = await rounds.enter("p", "p s", 3)
    assert s.surplus and s.round == 0 and not s.group_id
    report = (await rounds.leave(s, answered=True, members=1, n=3)).short
    assert report is not None and report.surplus and report.round == 0
    assert "likely n_samples_per_prompt = 4" in report.message()
    t = await rounds.enter("p", "p t", 3)
    assert (await rounds.leave(t, answered=True, members=1, n=3)).short is None
    for seat in (a, a2, b):
        assert await rounds.leave(seat, answered=True, members=3, n=3) == Left()
    now[0] = 10.0
    again = await rounds.enter("p", "p b", 3)
    assert again.round == 0 and not again.surplus  # a re-post of an answered member: its round
    assert again.ordinal == 0 and again.group_id == a.group_id
    assert await rounds.leave(again, answered=True, members=3, n=3) == Left()
    # a sample after every member of the full round has its answer: the next round, opened
    # right after a full round (a late surplus, or the prompt's next step)
    c = await rounds.enter("p", "p c", 3)
    assert c.round == 1 and not c.surplus and c.group_id != a.group_id and c.ordinal == 2
    now[0] = 150.0
    short = (await rounds.leave(c, answered=True, members=1, n=3)).short  # c's round closed short
    assert short is not None and short.after_full_round and short.round == 1
    assert "likely n_samples_per_prompt = 4" in short.message()
    now[0] = 400.0  # the prompt comes back: round 1 was answered, so round 2
    d = await rounds.enter("p", "p c", 3)  # even with c's text: past the retry window, a new one
    assert d.round == 2
    now[0] = 600.0  # it waits alone; answered short long after any full round: "short"
    short = (await rounds.leave(d, answered=True, members=1, n=3)).short
    assert short is not None and not short.after_full_round
    assert "only 1 of n=3" in short.message()
    assert await rounds.leave(d, answered=True, members=1, n=3) == Left()  # once per round
    e = await rounds.enter("p", "p e", 3)
    assert e.round == 3
    assert await rounds.leave(e, answered=False, members=0, n=3) == Left()  # an error: no answer
    assert "beyond n=3" in (await rounds.wrong(3) or "")  # the surplus showed n=3 is wrong
    assert await rounds.wrong(4) is None
    # just after a full round was answered, a sample opens the next round on probation: a
    # sibling joining it within late_s is the next step's (a quick step, nothing wrong) ...
    late = rounds_of(lambda: now[0], burst_s=150.0, late_s=5.0)
    late.job = "other-job"  # its own numbers and its own wrong n
    now[0] = 1000.0
    for seat in [await late.enter("q", f"q {i}", 2) for i in range(2)]:
        await late.leave(seat, answered=True, members=2, n=2)
    now[0] = 1001.0
    opener = await late.enter("q", "q 2", 2)
    now[0] = 1004.0
    sibling = await late.enter("q", "q 3", 2)
    assert (opener.round, sibling.round) == (1, 1) and not sibling.wrong
    assert (opener.ordinal, sibling.ordinal) == (1, 1) and await late.wrong(2) is None
    # ... one joining after late_s is of another step: the opener was a late surplus
    for seat in (opener, sibling):
        await late.leave(seat, answered=True, members=2, n=2)
    now[0] = 1005.0
    opener = await late.enter("q", "q 4", 2)
    now[0] = 1011.0
    joiner = await late.enter("q", "q 5", 2)
    assert joiner.wrong and not joiner.group_id and "no sibling followed" in await late.wrong(2)
    assert await late.leave(joiner, answered=True, members=1, n=2) == Left()
    assert (await rounds.enter("p", "p f", 3)).round == 3  # so its round stays open
    # a call seated in a full round whose replica died before `leave` is taken for gone
    # after stale_s: the prompt's next step is not surplus
    for i in range(3):
        await rounds.enter("r", f"r {i}", 4)
    last = await rounds.enter("r", "r 3", 4)
    now[0] += rounds.rules.stale_s + 1
    nxt = await rounds.enter("r", "r next", 4)
    assert not nxt.surplus and nxt.round == last.round + 1  # the next round, not a surplus
    assert await rounds.wrong(4) is None


async def test_a_rounds_fate_is_decided_once(rounds_of: Any) -> None:
    """n shown wrong while a round is not whole makes its fate raw for every member, even those
    whose computed numbers arrive later (the round filled on a replica that had not seen n
    wrong); a round whole when n is shown wrong waits for its numbers, and once a member is
    answered from them, a later release keeps the round computed (clean-clone CI saw a prompt
    answered 4 reweighted, 3 raw, on two replicas)."""
    now = [0.0]
    rounds = rounds_of(lambda: now[0])
    early = [await rounds.enter("p", f"p {i}", 3) for i in range(2)]
    assert await rounds.release(early[0], 3)  # 2 of 3: not whole, so the round is raw
    late = await rounds.enter("p", "p 2", 3)  # it fills after all (another replica)
    assert late.round == early[0].round
    assert await rounds.release(late, 3)  # whole now, but its fate stays raw
    left = await rounds.leave(late, answered=True, members=3, n=3)
    assert left.short is None and not left.stands  # its numbers came: answered raw all the same
    # a round whole when n is shown wrong: it waits for its numbers, which stand
    whole = [await rounds.enter("q", f"q {i}", 3) for i in range(3)]
    assert not await rounds.release(whole[0], 3)
    assert (await rounds.leave(whole[0], answered=True, members=3, n=3)).stands
    assert not await rounds.release(whole[1], 3)  # computed: no later release turns it raw
    assert (await rounds.leave(whole[1], answered=True, members=3, n=3)).stands
    assert (await rounds.leave(whole[2], answered=True, members=3, n=3)).stands
    # the fate outlives the round's closing: the next round opens, and a re-post of a member of
    # round 0 (OpenRLHF retries) is answered from round 0, computed still
    now[0] = 1.0
    nxt = await rounds.enter("q", "q next", 3)
    assert nxt.round == whole[0].round + 1
    assert await rounds.release(nxt, 3)  # round 1, 1 of 3: raw
    again = await rounds.enter("q", "q 0", 3)
    assert again.round == whole[0].round
    assert (await rounds.leave(again, answered=True, members=3, n=3)).stands
    assert not (await rounds.leave(nxt, answered=True, members=3, n=3)).stands


async def test_the_url_names_the_method_and_its_parameters(server, engine, tokenizer) -> None:
    """`?method=mmr&lambda=0.3` reweights with MMR at lambda 0.3, as /v1/reweight does on the
    same group; an unknown method or parameter is a 422 naming its query key, before any sample
    is seated (issue 50: the method was fixed to DRA and `?method=` ignored)."""
    rows = problems(k=1, n=4, seed=11, tokenizer=tokenizer)
    url = server.url("/v1/openrlhf/reward?n=4&method=mmr&lambda=0.3")
    outs = await run_openrlhf(url, rows, tokenizer)
    queries = [tokenizer.decode(o["observation_tokens"], skip_special_tokens=False) for o in outs]
    texts = [response_of(q, o["prompt"]) for q, o in zip(queries, outs, strict=True)]
    raw = [o["scores"][0] for o in outs]
    res = engine.reweight(ReweightRequest(
        groups=[Group(rewards=raw, completions=texts)], method="mmr", params={"lambda": 0.3}))
    want = dict(zip(texts, res.groups[0].rewards, strict=True))
    assert all(o["extra_logs"]["reweighted"] == [1.0] for o in outs)
    assert [o["reward"][0] for o in outs] == pytest.approx([want[t] for t in texts], abs=1e-6)
    dra = engine.reweight(ReweightRequest(groups=[Group(rewards=raw, completions=texts)]))
    assert res.groups[0].rewards != pytest.approx(dra.groups[0].rewards)  # it is not DRA's
    body = {"query": ["a"], "prompts": ["p"], "labels": ["1"]}
    async with httpx.AsyncClient(timeout=10) as c:
        for query, field in (("method=nosuch", "method"), ("method=mmr&lambda=abc", "lambda"),
                             ("surprise=1", "surprise")):  # fmt: skip
            r = await c.post(server.url(f"/v1/openrlhf/reward?n=2&{query}"), json=body)
            assert r.status_code == 422, r.text
            assert r.json()["error"]["field"] == field, r.text


# -- the live page, and replicas on one Redis (issue 50) ---------------------------------------


def _answered(k: int, n: int, step: int, collapsed: bool) -> list[tuple[str, str, str]]:
    """k prompts x n samples of one step (the same prompts every step, new completions):
    collapsed, every sample of a prompt ends in the right answer; else each in its own."""
    rows = []
    for p in range(k):
        x, y = 3 + p, 40
        prompt = f"compute {x} plus {y} at last"
        for j in range(n):
            a = x + y if collapsed else x + y + j
            text = f"step {step} case {j} " + WAYS[j % 6].format(a=a, b=a)
            rows.append((prompt, str(x + y), text))
    random.Random(step).shuffle(rows)
    return rows


async def test_openrlhf_steps_reach_the_live_page_and_a_collapse_fires_its_alert(
    engine, tokenizer, tmp_path
) -> None:
    """`?batch=` (--rollout.batch_size): each round's number among the job's rounds // batch
    is its members' step, so GET /v1/dashboard has a point per OpenRLHF step, and a run whose
    groups collapse onto one answer for 3 steps fires the collapse alert. The job is a tenant
    of its own (its OpenRLHF token names it), so the board is this test's alone."""
    name, key, token = f"orlhf-{os.urandom(4).hex()}", "orlhf-page-key-0001", "orlhf-page-token"
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps({"tenants": [{"name": name, "key": key, "openrlhf_token": token}]}))
    with BackgroundService(loopback(tenants=str(path)), engine) as svc:
        url = f"{svc.http_url}/v1/openrlhf/{token}/reward?n=4&batch=2"
        async with httpx.AsyncClient(timeout=30) as c:
            for step, collapsed in enumerate([False, True, True, True]):
                outs = await run_openrlhf(url, _answered(2, 4, step, collapsed), tokenizer)
                assert all(o["extra_logs"]["reweighted"] == [1.0] for o in outs)
                board = (await c.get(f"{svc.http_url}/v1/dashboard",
                                     headers={"authorization": f"Bearer {key}"})).json()
                steps = {s["step"]: s for s in board["steps"]}
                assert board["job"] == name and sorted(steps) == list(range(step + 1)), steps
                assert steps[step]["groups"] == 2
                assert steps[step]["distinct_answers_median"] == (1 if collapsed else 4)
                assert board["collapse"]["firing"] == (step == 3), board["collapse"]
    assert board["collapse"]["since_step"] == 1


def _served_count(metrics: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("reweighter_requests_total{")
               and 'endpoint="openrlhf"' in line and 'status="ok"' in line)  # fmt: skip


@pytest.mark.server
async def test_two_replicas_on_one_redis_serve_any_sample(
    engine, tokenizer, shared_redis_url
) -> None:
    """Issue 50: two `reweighter serve` replicas sharing one Redis, and OpenRLHF's own client
    with both URLs (`--reward.remote_url A,B`: it sends its calls to them by turns). 4 prompts
    x 8 samples, twice (the prompts come back): every sample is reweighted, with MMR as the URL
    says, and equals /v1/reweight on its whole group; each replica served half the samples; the
    steps (`?batch=4`) are 0 then 1 on the replicas' boards together."""
    from reweighter.launch import serve

    prefix = f"test:orlhf2:{os.urandom(6).hex()}:"
    settings = {"redis_url": shared_redis_url, "assembly_prefix": prefix}
    replicas = [serve(settings=settings)]  # one after the other: a child started from a
    try:  # thread dies with that thread (its parent-death signal)
        replicas.append(serve(settings=settings))
        urls = [f"{r.url}/v1/openrlhf/reward?n=8&method=mmr&lambda=0.5&batch=4" for r in replicas]
        for rnd in range(2):
            rows = [(p, lab, f"{r} pass {rnd}") for p, lab, r in
                    problems(k=4, n=8, seed=31, tokenizer=tokenizer)]  # fmt: skip
            outs = await run_openrlhf(urls, rows, tokenizer)
            assert [o["extra_logs"]["reweighted"] for o in outs] == [[1.0]] * 32
            want = expected(engine, outs, tokenizer, "mmr", **{"lambda": 0.5})
            assert [o["reward"][0] for o in outs] == pytest.approx(want, abs=1e-6)
            dra = expected(engine, outs, tokenizer)
            assert [o["reward"][0] for o in outs] != pytest.approx(dra, abs=1e-6)
        async with httpx.AsyncClient(timeout=30) as c:
            served = [_served_count((await c.get(f"{r.url}/metrics")).text) for r in replicas]
            boards = [(await c.get(f"{r.url}/v1/dashboard")).json() for r in replicas]
        assert served == [32, 32], served  # by turns: each replica served half
        groups: dict[int, int] = {}
        for board in boards:
            for st in board["steps"]:
                groups[st["step"]] = groups.get(st["step"], 0) + st["groups"]
        assert groups == {0: 4, 1: 4}, groups  # each group computed once, on one replica
    finally:
        for r in replicas:
            r.close()
        import redis

        sync = redis.Redis.from_url(shared_redis_url)
        keys = list(sync.scan_iter(match=f"{prefix}*"))
        if keys:
            sync.delete(*keys)


async def test_a_surplus_on_one_replica_turns_the_other_raw_too(
    engine, tokenizer, shared_redis_url
) -> None:
    """Two services on one Redis, OpenRLHF's client alternating them, `?n=7` with 8 samples a
    prompt: the surplus one replica sees shows n wrong on both (the rounds' shared state): no
    reweighted number is computed over a group that is not exactly 7 samples of one pass, and
    the next pass is answered raw, flagged wrong_n, by both replicas."""
    prefix = f"test:orlhf-wrong:{os.urandom(6).hex()}:"
    settings = loopback(redis_url=shared_redis_url, assembly_prefix=prefix)
    try:
        with BackgroundService(settings, engine) as a, BackgroundService(settings, engine) as b:
            urls = [f"{s.http_url}/v1/openrlhf/reward?n=7" for s in (a, b)]
            for step, suffix in enumerate([" first pass", " second pass"]):
                rows = [(p, lab, r + suffix) for p, lab, r in
                        problems(k=4, n=8, seed=66, tokenizer=tokenizer)]  # fmt: skip
                outs = await run_openrlhf(urls, rows, tokenizer)
                _check_pass(outs, engine, tokenizer, suffix, 7)
                if step == 0:
                    assert sum(o["extra_logs"]["surplus"][0] for o in outs) >= 1
                else:
                    assert all(o["extra_logs"]["wrong_n"] == [1.0] for o in outs)
    finally:
        import redis

        sync = redis.Redis.from_url(shared_redis_url)
        keys = list(sync.scan_iter(match=f"{prefix}*"))
        assert any(b"openrlhf:wrong:" in k for k in keys), keys  # n=7's reason, shared
        sync.delete(*keys)
