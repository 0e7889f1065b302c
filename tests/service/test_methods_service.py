"""The issue-30 methods as a user meets them: over HTTP and gRPC on a live service (raw JSON and
the generated stub), the Python clients, /v1/info and the OpenAPI schema, and the field-named
errors for answers, advantage_params, prompt_key and step on both transports."""

from __future__ import annotations

import math
import uuid

import grpc
import httpx
import pytest

from reweighter.client import GrpcReweighterClient, ReweighterClient
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2 as pb
from reweighter.wire.grpc import to_proto

from .test_errors import _grpc_error, _http_json, _post, _trailing

E4 = [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
TXT = ["first answer", "second answer"]


def test_darling_on_both_clients(http: ReweighterClient, grpc_client: GrpcReweighterClient) -> None:
    req = ReweightRequest(
        groups=[Group([1.0, 1.0, 0.5, 0.0], embeddings=E4, answers=["4", "4", "5", None])],
        method="darling",
    )
    for client in (http, grpc_client):
        out = client.reweight(req).groups[0]
        assert out.rewards == pytest.approx([2 / 3, 2 / 3, 0.5, 0.0])
        assert (out.stats.classes, out.stats.distinct_answers) == (3, 2)
        assert out.stats.effective_size == pytest.approx(16 / 6)


def test_pass_at_k_on_both_clients(
    http: ReweighterClient, grpc_client: GrpcReweighterClient
) -> None:
    req = ReweightRequest(
        groups=[Group([0.0, 1.0, 0.0, 0.0], embeddings=E4)],
        method="none",
        advantages="pass_at_k",
        advantage_params={"k": 2},
    )
    for client in (http, grpc_client):
        assert client.reweight(req).groups[0].advantages == pytest.approx(
            [-1 / 3, 1.0, -1 / 3, -1 / 3]
        )


def test_outcome_ucb_across_steps_and_transports(
    http: ReweighterClient, grpc_client: GrpcReweighterClient
) -> None:
    key = f"prompt-{uuid.uuid4().hex}"

    def req(step: int, answers: list[str | None]) -> ReweightRequest:
        n = len(answers)
        group = Group(
            [0.0] * n,
            embeddings=[[1.0, float(i)] for i in range(n)],
            answers=answers,
            prompt_key=key,
        )
        return ReweightRequest(
            groups=[group],
            method="outcome_ucb",
            params={"scale": 1.0, "baseline": None},
            step=step,
        )

    assert http.reweight(req(1, ["a", "a", None])).groups[0].rewards == [1.0, 1.0, 0.0]
    # The same step over gRPC is a retry: counted once, the identical answer.
    assert grpc_client.reweight(req(1, ["a", "a", None])).groups[0].rewards == [1.0, 1.0, 0.0]
    got = grpc_client.reweight(req(2, ["a", "b"])).groups[0].rewards
    assert got == pytest.approx([1 / math.sqrt(2), 1.0])  # a seen twice at step 1
    assert http.reweight(req(2, ["a", "b"])).groups[0].rewards == pytest.approx(got)


INVALID = {
    "answers length": (Group([1.0, 0.0], TXT, answers=["a"]), {}, "groups[0].answers"),
    "k above the group": (
        Group([1.0, 0.0], TXT),
        {"method": "none", "advantages": "pass_at_k", "advantage_params": {"k": 3}},
        "advantage_params.k",
    ),
    "k below 1": (
        Group([1.0, 0.0], TXT),
        {"method": "none", "advantages": "pass_at_k", "advantage_params": {"k": 0}},
        "advantage_params.k",
    ),
    "k not whole": (
        Group([1.0, 0.0], TXT),
        {"method": "none", "advantages": "pass_at_k", "advantage_params": {"k": 1.5}},
        "advantage_params.k",
    ),
    "pass_at_k with a reweighting method": (
        Group([1.0, 0.0], TXT),
        {"method": "dra", "advantages": "pass_at_k", "advantage_params": {"k": 1}},
        "advantages",
    ),
    "advantage_params for grpo": (
        Group([1.0, 0.0], TXT),
        {"advantages": "grpo", "advantage_params": {"k": 1}},
        "advantage_params.k",
    ),
    "outcome_ucb without prompt_key": (
        Group([1.0, 0.0], TXT, answers=["a", "b"]),
        {"method": "outcome_ucb", "step": 1},
        "groups[0].prompt_key",
    ),
    "outcome_ucb without answers": (
        Group([1.0, 0.0], TXT, prompt_key="p"),
        {"method": "outcome_ucb", "step": 1},
        "groups[0].answers",
    ),
    "outcome_ucb without step": (
        Group([1.0, 0.0], TXT, answers=["a", "b"], prompt_key="p"),
        {"method": "outcome_ucb"},
        "step",
    ),
    "negative step": (
        Group([1.0, 0.0], TXT, answers=["a", "b"], prompt_key="p"),
        {"method": "outcome_ucb", "step": -1},
        "step",
    ),
    "outcome_ucb baseline not a number or mean": (
        Group([1.0, 0.0], TXT, answers=["a", "b"], prompt_key="p"),
        {"method": "outcome_ucb", "step": 1, "params": {"baseline": "max"}},
        "params.baseline",
    ),
    "outcome_ucb target": (
        Group([1.0, 0.0], TXT, answers=["a", "b"], prompt_key="p"),
        {"method": "outcome_ucb", "step": 1, "params": {"target": "loss"}},
        "params.target",
    ),
    "darling threshold out of range": (
        Group([1.0, 0.0], TXT),
        {"method": "darling", "params": {"class_threshold": 2}},
        "params.class_threshold",
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_input_on_both_transports(case: str, service: BackgroundService) -> None:
    group, extra, field = INVALID[case]
    request = ReweightRequest(groups=[group], **extra)
    response = _post(service.http_url, _http_json(request))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    err = _grpc_error(service.grpc_target, to_proto(request, pb.ReweightRequest))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == f"{field}: {error['message']}"
    assert _trailing(err)["reweighter-error-field"] == field


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            b'{"groups": [{"rewards": [1, 0], "completions": ["a", "b"], "answers": ["a", 3]}]}',
            "groups[0].answers[1]",
        ),
        (
            b'{"groups": [{"rewards": [1], "completions": ["a"], "answers": "a"}]}',
            "groups[0].answers",
        ),
        (
            b'{"groups": [{"rewards": [1], "completions": ["a"], "prompt_key": 7}]}',
            "groups[0].prompt_key",
        ),
        (b'{"groups": [{"rewards": [1], "completions": ["a"]}], "step": "one"}', "step"),
        (
            b'{"groups": [{"rewards": [1], "completions": ["a"]}], "advantage_params": [1]}',
            "advantage_params",
        ),
    ],
)
def test_http_schema_errors_name_the_new_fields(
    body: bytes, field: str, service: BackgroundService
) -> None:
    response = _post(service.http_url, body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_info_and_openapi_list_the_new_methods_and_fields(service: BackgroundService) -> None:
    info = httpx.get(f"{service.http_url}/v1/info", timeout=10).json()
    assert {"darling", "outcome_ucb"} <= set(info["methods"])
    assert "class_threshold" in info["methods"]["darling"]["params"]["properties"]
    assert "pass_at_k" in info["advantages"]
    schema = httpx.get(f"{service.http_url}/openapi.json", timeout=10).json()
    text = str(schema)
    for name in (
        "darling",
        "outcome_ucb",
        "pass_at_k",
        "prompt_key",
        "advantage_params",
        "distinct_answers",
        "effective_size",
    ):
        assert name in text, name
    props = schema["components"]["schemas"]["ReweightIn"]["properties"]
    assert {"step", "advantage_params"} <= set(props)
    assert {"answers", "prompt_key"} <= set(
        schema["components"]["schemas"]["GroupIn"]["properties"]
    )
