"""What the edge says in /openapi.json and does at the door: an undeclared method gets 405
(naming the methods in `Allow`) before any key is asked for; every /v1 operation documents
every status the edge and the engine can give it and the `x-request-timeout` header admission
reads; the OpenRLHF route documents its `n` and its path's token. A real app on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import ServedApp, loopback

from reweighter.api.http.app import create_app
from reweighter.api.http.router import ERROR_RESPONSES
from reweighter.engine import ReweightEngine
from reweighter.tenancy import DEADLINE_HEADER


@pytest.fixture(scope="module")
def served(engine: ReweightEngine) -> Iterator[ServedApp]:
    with ServedApp(create_app(engine, loopback(api_key="k"))) as app:
        yield app


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("TRACE", "/v1/openrlhf/some-token/reward", "POST"),
        ("PUT", "/v1/reweight", "POST"),
        ("GET", "/v1/groups/g1/members", "POST"),
        ("DELETE", "/v1/info", "GET"),
    ],
)
def test_an_undeclared_method_is_405_before_the_key(
    served: ServedApp, method: str, path: str, allow: str
) -> None:
    for headers in ({}, {"authorization": "Bearer k"}):  # with or without the key: the same
        r = httpx.request(method, served.url(path), headers=headers, timeout=30)
        assert r.status_code == 405, (headers, r.text)
        assert r.headers["allow"] == allow
        assert r.json()["error"]["type"] == "MethodNotAllowed"


def test_a_declared_method_still_needs_the_key(served: ServedApp) -> None:
    """The 405 door opens only for methods the path does not take: a path's own method, and a
    path no route has, are judged by admission as before."""
    for method, path in (("POST", "/v1/reweight"), ("GET", "/v1/nosuch"), ("GET", "/v1/info")):
        r = httpx.request(method, served.url(path), timeout=30)
        assert r.status_code == 401, (method, path, r.text)


def test_every_v1_operation_documents_its_statuses_and_the_deadline_header(
    served: ServedApp,
) -> None:
    doc = httpx.get(served.url("/openapi.json"), timeout=30).json()
    v1 = [(p, m, op) for p, ops in doc["paths"].items() if p.startswith("/v1/")
          for m, op in ops.items()]  # fmt: skip
    assert len(v1) >= 9
    for path, method, op in v1:
        statuses = {int(s) for s in op["responses"] if s.isdigit()}
        assert {int(s) for s in ERROR_RESPONSES} <= statuses, (method, path, statuses)
        assert {400, 401, 405, 413, 422, 429, 503, 504} <= statuses, (method, path)
        names = [(p["in"], p["name"]) for p in op.get("parameters", [])]
        assert ("header", DEADLINE_HEADER) in names, (method, path, names)
    openrlhf = doc["paths"]["/v1/openrlhf/{token}/reward"]["post"]["parameters"]
    assert {(p["in"], p["name"], p["required"]) for p in openrlhf} >= {
        ("query", "n", False),
        ("path", "token", True),
    }
    plain = doc["paths"]["/v1/openrlhf/reward"]["post"]["parameters"]
    assert ("query", "n") in {(p["in"], p["name"]) for p in plain}
