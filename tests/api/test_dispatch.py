"""One HTTP edge (api/http): every /v1 route is served by one dispatcher (dispatch.EdgeRoute)
behind one admission step (admission.Admission), and answers exactly as FastAPI's own handler
of the same route would.

Two real servers on loopback over the same loaded engine: the app as shipped, and the same app
built with FastAPI's stock route handler in place of the dispatcher's (the test swaps it in
while the app is built; the product has no switch for it). Every body below, valid or not, to
every kind of /v1 route, must get the same status and the same JSON from both; and the shipped
app must really serve the valid ones without FastAPI's handler.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import ServedApp, loopback
from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from reweighter.api.http import dispatch
from reweighter.api.http.admission import Admission
from reweighter.api.http.app import create_app
from reweighter.api.http.dispatch import EdgeRoute, check_routes, v1_router
from reweighter.engine import ReweightEngine
from reweighter.tenancy import TenantTable

TEXTS = [
    "First add 3 and 4 to get 7, then multiply by 2: the answer is 14.",
    "Multiply 7 by 2 directly after adding: 3 + 4 = 7, so 14.",
    "I guess the answer is 12 because the numbers look small.",
    "First add 3 and 4 to get 7, then multiply by 2: the answer is 14.",
]


def group(**extra: Any) -> dict[str, Any]:
    return {"rewards": [1.0, 1.0, 0.0, 1.0], "completions": TEXTS, **extra}


VALID: list[tuple[str, dict[str, Any]]] = [
    ("/v1/reweight", {"groups": [group()]}),
    ("/v1/reweight", {"groups": [group(id="g1"), group(id="g2")], "method": "mmr"}),
    ("/v1/reweight", {"groups": [group(answers=["14", "14", "12", "14"])], "method": "darling"}),
    ("/v1/reweight", {"groups": [group(prompt_key="p1", answers=["14", "14", "12", None])],
                      "method": "outcome_ucb", "step": 3}),
    ("/v1/reweight", {"groups": [group()], "method": "none", "advantages": "grpo"}),
    ("/v1/reweight", {"groups": [group()], "method": "none", "advantages": "pass_at_k",
                      "advantage_params": {"k": 2}}),
    ("/v1/reweight", {"groups": [{"rewards": [1, 0],
                                  "embeddings": [[1.0, 0.0, 0.0], [0.6, 0.8, 0.0]]}]}),
    ("/v1/embed", {"inputs": TEXTS[:2]}),
    ("/v1/embeddings", {"input": TEXTS[:2], "model": "all-MiniLM-L6-v2"}),
    ("/v1/embeddings", {"input": TEXTS[0], "model": "all-MiniLM-L6-v2",
                        "encoding_format": "base64"}),
]  # fmt: skip

# Each refused by the schema (FastAPI's handler answers) or by the engine (the one writer).
INVALID: list[tuple[str, bytes]] = [
    ("/v1/reweight", b""),
    ("/v1/reweight", b"{not json"),
    ("/v1/reweight", b"[1, 2]"),
    ("/v1/reweight", json.dumps({"groups": [group()], "surprise": 1}).encode()),
    ("/v1/reweight", json.dumps({"groups": [{"rewards": ["1"], "completions": ["a"]}]}).encode()),
    ("/v1/reweight", json.dumps({"groups": [{"rewards": [True], "completions": ["a"]}]}).encode()),
    ("/v1/reweight", json.dumps({"groups": [group()], "step": 2.5}).encode()),  # 2.0 is 2
    ("/v1/reweight", b'{"groups": [{"rewards": [NaN], "completions": ["a"]}]}'),
    ("/v1/reweight", json.dumps({"groups": [{"rewards": [1.0, 0.0],
                                             "completions": ["a"]}]}).encode()),
    ("/v1/reweight", json.dumps({"groups": [group()], "method": "no-such-method"}).encode()),
    ("/v1/reweight", json.dumps({"groups": [group()], "params": {"lambda": 7},
                                 "method": "mmr"}).encode()),
    ("/v1/reweight", json.dumps({"groups": []}).encode()),
    ("/v1/embed", json.dumps({"inputs": []}).encode()),
    ("/v1/embed", json.dumps({"inputs": "x", "normalize": False}).encode()),
    ("/v1/embeddings", json.dumps({"input": "x", "model": "nosuch"}).encode()),
    ("/v1/embeddings", b"{"),
    ("/v1/groups/g/members", json.dumps({"member_id": "", "group_size": 2}).encode()),
    ("/v1/openrlhf/reward", json.dumps({"query": ["a"], "prompts": []}).encode()),
]  # fmt: skip


def _stock_app(engine: ReweightEngine, monkeypatch: pytest.MonkeyPatch) -> FastAPI:
    """The same app, its /v1 routes on FastAPI's own handler (the dispatcher's bypassed)."""
    with monkeypatch.context() as m:
        m.setattr(EdgeRoute, "get_route_handler", APIRoute.get_route_handler)
        return create_app(engine, loopback())


@pytest.fixture(scope="module")
def urls(engine: ReweightEngine) -> Iterator[tuple[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        stock = _stock_app(engine, mp)
    with ServedApp(create_app(engine, loopback())) as shipped, ServedApp(stock) as routed:
        yield shipped.url(""), routed.url("")


def both(urls: tuple[str, str], path: str, data: bytes, content_type: str | None = None):
    headers = {"content-type": content_type or "application/json"}
    if content_type == "":
        headers = {}
    out = []
    for url in urls:
        r = httpx.post(url + path, content=data, headers=headers, timeout=60)
        out.append((r.status_code, r.headers.get("content-type"), r.json()))
    return out


@pytest.mark.parametrize(("path", "body"), VALID, ids=range(len(VALID)))
def test_valid_requests_get_the_same_answer(urls: tuple[str, str], path: str, body: dict) -> None:
    shipped, routed = both(urls, path, json.dumps(body).encode())
    assert shipped[0] == 200, shipped
    assert shipped == routed


@pytest.mark.parametrize(("path", "data"), INVALID, ids=range(len(INVALID)))
def test_refusals_are_the_same(urls: tuple[str, str], path: str, data: bytes) -> None:
    shipped, routed = both(urls, path, data)
    assert shipped[0] in (400, 404, 409, 413, 422, 503), shipped
    assert shipped == routed


@pytest.mark.parametrize(
    "content_type",
    ["", "text/plain", "application/vnd.rw+json", "application/json; charset=utf-8"],
)
def test_other_content_types_are_judged_as_fastapi_judges_them(
    urls: tuple[str, str], content_type: str
) -> None:
    shipped, routed = both(urls, "/v1/reweight", json.dumps(VALID[0][1]).encode(), content_type)
    assert shipped == routed


@pytest.mark.parametrize("path", ["/v1/info", "/v1/models", "/v1/dashboard"])
def test_bodiless_routes_get_the_same_answer(urls: tuple[str, str], path: str) -> None:
    shipped, routed = (httpx.get(u + path, timeout=30) for u in urls)
    assert shipped.status_code == routed.status_code == 200
    a, b = shipped.json(), routed.json()
    if path == "/v1/info":  # live counters may move between the two calls
        a.pop("cache", None), b.pop("cache", None)
    assert a == b


def test_valid_requests_never_reach_fastapis_handler(
    engine: ReweightEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatcher serves a body its model accepts (FastAPI's handler of the route is not
    called) and hands it one the model refuses; and the caller is resolved once per request,
    by admission (no route dependency resolves it again)."""
    stock_calls: list[str] = []
    real = APIRoute.get_route_handler

    def counting(self: APIRoute):  # noqa: ANN202 - FastAPI's handler type
        handler = real(self)

        async def counted(request):  # noqa: ANN001, ANN202
            stock_calls.append(request.url.path)
            return await handler(request)

        return counted

    monkeypatch.setattr(APIRoute, "get_route_handler", counting)
    app = create_app(engine, loopback(api_key="k"))
    resolutions: list[str | None] = []
    resolve = TenantTable.resolve_bearer

    def counted_resolve(self: TenantTable, header: str | None):  # noqa: ANN202
        resolutions.append(header)
        return resolve(self, header)

    monkeypatch.setattr(TenantTable, "resolve_bearer", counted_resolve)
    key = {"authorization": "Bearer k"}
    with ServedApp(app) as served:
        ok = httpx.post(served.url("/v1/reweight"), json=VALID[0][1], headers=key, timeout=60)
        assert ok.status_code == 200 and stock_calls == []
        assert resolutions == ["Bearer k"]
        bad = httpx.post(served.url("/v1/reweight"), content=b"{", headers=key, timeout=60)
        assert bad.status_code == 422 and stock_calls == ["/v1/reweight"]
        assert len(resolutions) == 2
    assert [m.cls for m in app.user_middleware] == [Admission]  # the one middleware


def test_a_route_dependency_is_refused_where_it_would_be_skipped() -> None:
    """A `Depends` on a /v1 route or on the router that includes it would be skipped by the
    dispatcher: both are refused when the app is built, naming admission.py."""

    async def guard() -> None:
        return None

    router = v1_router(prefix="/v1", dependencies=[Depends(guard)])
    with pytest.raises(TypeError, match=r"admission\.py"):

        @router.get("/x")
        async def x() -> dict[str, int]:
            return {}

    app = FastAPI()
    inner = v1_router()

    @inner.get("/y")
    async def y() -> dict[str, int]:
        return {}

    app.include_router(inner, prefix="/v1", dependencies=[Depends(guard)])
    with pytest.raises(TypeError, match=r"admission\.py"):
        check_routes(app)
    assert dispatch.json_content("application/problem+json")
    assert not dispatch.json_content("text/json")
