"""The calls' direct path (api/http/calls.py) answers exactly as the FastAPI route does.

Two real servers on loopback over the same loaded engine: the app as shipped (well-formed
`POST /v1/reweight` bodies served before FastAPI routes them) and the same app with
`direct_calls=False` (everything through FastAPI's route, as before the direct path). Every
body below, valid or not, must get the same status and the same JSON from both; and the
shipped app must really serve the valid ones directly (FastAPI's route never runs for them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import ServedApp

from reweighter.api.http import router as router_module
from reweighter.api.http.app import create_app
from reweighter.api.http.calls import CallFastPath
from reweighter.api.http.middleware import BodyLimit
from reweighter.engine import ReweightEngine

from .conftest import loopback

TEXTS = [
    "First add 3 and 4 to get 7, then multiply by 2: the answer is 14.",
    "Multiply 7 by 2 directly after adding: 3 + 4 = 7, so 14.",
    "I guess the answer is 12 because the numbers look small.",
    "First add 3 and 4 to get 7, then multiply by 2: the answer is 14.",
]


def group(**extra: Any) -> dict[str, Any]:
    return {"rewards": [1.0, 1.0, 0.0, 1.0], "completions": TEXTS, **extra}


VALID: list[dict[str, Any]] = [
    {"groups": [group()]},
    {"groups": [group(id="g1"), group(id="g2")], "method": "mmr"},
    {"groups": [group(answers=["14", "14", "12", "14"])], "method": "darling"},
    {"groups": [group(prompt_key="p1", answers=["14", "14", "12", None])],
     "method": "outcome_ucb", "step": 3},
    {"groups": [group()], "method": "none", "advantages": "grpo"},
    {"groups": [group()], "method": "none", "advantages": "pass_at_k",
     "advantage_params": {"k": 2}},
    {"groups": [{"rewards": [1, 0], "embeddings": [[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]]}]},
]  # fmt: skip

# Each refused by the schema (FastAPI's route answers) or by the engine (the one mapping).
INVALID: list[bytes] = [
    b"",
    b"{not json",
    b"[1, 2]",
    json.dumps({"groups": [group()], "surprise": 1}).encode(),
    json.dumps({"groups": [{"rewards": ["1"], "completions": ["a"]}]}).encode(),
    json.dumps({"groups": [{"rewards": [True], "completions": ["a"]}]}).encode(),
    json.dumps({"groups": [group()], "step": 2.0}).encode(),
    b'{"groups": [{"rewards": [NaN], "completions": ["a"]}]}',
    json.dumps({"groups": [{"rewards": [1.0, 0.0], "completions": ["a"]}]}).encode(),
    json.dumps({"groups": [group()], "method": "no-such-method"}).encode(),
    json.dumps({"groups": [group()], "params": {"lambda": 7}, "method": "mmr"}).encode(),
    json.dumps({"groups": []}).encode(),
]


@pytest.fixture(scope="module")
def urls(engine: ReweightEngine) -> Iterator[tuple[str, str]]:
    settings = loopback()
    with ServedApp(create_app(engine, settings)) as direct, ServedApp(
        create_app(engine, settings, direct_calls=False)
    ) as routed:
        yield direct.url(""), routed.url("")


def both(urls: tuple[str, str], data: bytes, content_type: str | None = "application/json"):
    headers = {"content-type": content_type} if content_type else {}
    out = []
    for url in urls:
        r = httpx.post(url + "/v1/reweight", content=data, headers=headers, timeout=60)
        out.append((r.status_code, r.headers.get("content-type"), r.json()))
    return out


@pytest.mark.parametrize("body", VALID, ids=range(len(VALID)))
def test_valid_requests_get_the_same_answer(urls: tuple[str, str], body: dict) -> None:
    direct, routed = both(urls, json.dumps(body).encode())
    assert direct[0] == 200, direct
    assert direct == routed


@pytest.mark.parametrize("data", INVALID, ids=range(len(INVALID)))
def test_refusals_are_the_same(urls: tuple[str, str], data: bytes) -> None:
    direct, routed = both(urls, data)
    assert direct[0] in (400, 413, 422), direct
    assert direct == routed


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/vnd.rw+json", "application/json; charset=utf-8"],
)
def test_other_content_types_are_judged_as_fastapi_judges_them(
    urls: tuple[str, str], content_type: str | None
) -> None:
    direct, routed = both(urls, json.dumps(VALID[0]).encode(), content_type)
    assert direct == routed


def test_valid_requests_never_reach_fastapis_route(
    engine: ReweightEngine, urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The direct path really serves them (the FastAPI route's `serve_call` is not called),
    while a body the schema refuses still goes through FastAPI; and it sits inside BodyLimit,
    so the key, tenant, deadline and size are judged before either path."""
    calls: list[str] = []
    real = router_module.serve_call

    async def counted(call, engine, metrics, body):  # noqa: ANN001, ANN202 - same signature
        calls.append(call.name)
        return await real(call, engine, metrics, body)

    monkeypatch.setattr(router_module, "serve_call", counted)
    direct, routed = both(urls, json.dumps(VALID[0]).encode())
    assert direct[0] == routed[0] == 200
    assert calls == ["reweight"]  # the routed app's only
    app = create_app(engine, loopback())
    order = [m.cls for m in app.user_middleware]
    assert order.index(BodyLimit) < order.index(CallFastPath)  # BodyLimit is outermost
