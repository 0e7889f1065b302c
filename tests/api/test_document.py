"""What the edge says in /openapi.json and does at the door: an undeclared method gets 405
(naming the methods in `Allow`) before any key is asked for; every /v1 operation documents
every status the edge and the engine can give it and the `x-request-timeout` header admission
reads; the OpenRLHF route documents its `n` and its path's token. A real app on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from conftest import ServedApp, loopback

from reweighter.api.http.app import create_app
from reweighter.api.http.openai import OPENAI_RESPONSES
from reweighter.api.http.router import CONNECTION_RESPONSES, ERROR_RESPONSES
from reweighter.engine import ReweightEngine
from reweighter.engine.checks import check_member
from reweighter.errors import InvalidInput
from reweighter.limits import Limits
from reweighter.tenancy import DEADLINE_HEADER
from reweighter.types import MemberSubmission
from reweighter.wire.openai import OPENAI_PATHS


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
        if path in OPENAI_PATHS:  # OpenAI's shape, and 400 for bad input (never 422)
            assert {int(s) for s in OPENAI_RESPONSES} <= statuses, (method, path, statuses)
            assert {400, 401, 405, 408, 413, 429, 503, 504} <= statuses, (method, path)
            continue
        assert {int(s) for s in ERROR_RESPONSES} <= statuses, (method, path, statuses)
        assert {400, 401, 405, 408, 413, 422, 429, 503, 504} <= statuses, (method, path)
        names = [(p["in"], p["name"]) for p in op.get("parameters", [])]
        assert ("header", DEADLINE_HEADER) in names, (method, path, names)
    openrlhf = doc["paths"]["/v1/openrlhf/{token}/reward"]["post"]["parameters"]
    assert {(p["in"], p["name"], p["required"]) for p in openrlhf} >= {
        ("query", "n", True),  # required: this service sets no --openrlhf-n
        ("path", "token", True),
    }
    plain = doc["paths"]["/v1/openrlhf/reward"]["post"]["parameters"]
    assert ("query", "n", True) in {(p["in"], p["name"], p["required"]) for p in plain}
    # the connection layer's answers, on every operation, the probes' too
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert set(map(str, CONNECTION_RESPONSES)) <= set(op["responses"]), (method, path)


def test_the_schema_says_what_the_service_takes(served: ServedApp) -> None:
    """The rules the engine judges that a schema can say are in the document, where a
    generated client reads them (declared once, on the message's field: types.wire(rules=))."""
    doc = httpx.get(served.url("/openapi.json"), timeout=30).json()
    c = doc["components"]["schemas"]
    assert c["EmbedIn"]["properties"]["normalize"]["const"] is True
    member = c["MemberIn"]["properties"]
    assert (member["member_id"]["minLength"], member["member_id"]["maxLength"]) == (1, 256)
    assert member["group_size"]["minimum"] == 1 and member["timeout_s"]["exclusiveMinimum"] == 0
    assert [b["required"] for b in c["MemberIn"]["oneOf"]] == [["completion"], ["embedding"]]
    assert [b["required"] for b in c["GroupIn"]["oneOf"]] == [["completions"], ["embeddings"]]
    assert c["ReweightIn"]["properties"]["step"]["minimum"] == 0
    (group_id,) = [p for p in doc["paths"]["/v1/groups/{group_id}/members"]["post"]["parameters"]
                   if p["in"] == "path"]  # fmt: skip
    assert group_id["schema"]["minLength"] == 1
    # this service has a key: every /v1 operation asks for it (the token path may go without)
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert doc["paths"]["/v1/reweight"]["post"]["security"] == [{"bearer": []}]
    assert {} in doc["paths"]["/v1/openrlhf/{token}/reward"]["post"]["security"]
    assert "security" not in doc["paths"]["/healthz"]["get"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/embed", {"inputs": ["x"], "normalize": False}, "normalize"),
        ("/v1/reweight", {"groups": [{"rewards": [1.0]}]}, "groups[0]"),
        ("/v1/reweight", {"groups": [{"rewards": [1.0], "embeddings": [[1.0]]}], "step": -1},
         "step"),
    ],
)  # fmt: skip
def test_what_the_schema_forbids_the_engine_refuses(
    served: ServedApp, path: str, body: dict, field: str
) -> None:
    """The document's word, kept: each rule above is refused, naming its field (the engine's
    check of the same declaration, so gRPC refuses it alike)."""
    r = httpx.post(served.url(path), json=body, headers={"authorization": "Bearer k"}, timeout=30)
    assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text


LIMITS = Limits.from_settings(loopback())


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"member_id": ""}, "member_id", "must be a non-empty string"),
        ({"member_id": "m" * 257}, "member_id", "longer than 256 characters"),
        ({"group_id": ""}, "group_id", "must be a non-empty string"),
        ({"group_size": 0}, "group_size", "must be >= 1, got 0"),
        ({"timeout_s": 0.0}, "timeout_s", "must be > 0, got 0.0"),
        ({"embedding": [], "completion": None}, "embedding", "must have at least 1 item(s)"),
        ({"completion": "x"}, "completion", "give either completion or embedding, not both"),
        ({"prompt_key": "k" * 1025}, "prompt_key", "longer than 1024 characters"),
    ],
)
def test_a_members_declared_rules_are_the_engines(change: dict, field: str, message: str) -> None:
    """A member's rules as the engine judges them for every transport (the member route of the
    app above has no assembler): each declared once, on MemberSubmission's field."""
    member = MemberSubmission(group_id="g", member_id="m", group_size=2, reward=1.0,
                              embedding=[1.0, 0.0])  # fmt: skip
    with pytest.raises(InvalidInput) as info:
        check_member(replace(member, **change), LIMITS, default_timeout_s=1, max_timeout_s=2)
    assert (info.value.field, info.value.message) == (field, message)
