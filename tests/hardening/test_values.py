"""Hostile values on both transports (items 3, 9, 10 of the hardening issue): never a 500, a
NaN, an infinity or a silently flattened number; always a 4xx / INVALID_ARGUMENT naming the field
in the documented shape."""

from __future__ import annotations

import json
import math

import grpc
import httpx
import pytest
from google.protobuf import struct_pb2

from reweighter.wire._proto.reweighter.v1 import reweighter_pb2 as pb

from .conftest import AUTH, Served, error_shape

UNIT = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]
FIELD_KEY = "reweighter-error-field"
REWEIGHT = "/reweighter.v1.Reweighter/Reweight"


def post(served: Served, body: object, path: str = "/v1/reweight") -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**AUTH, "content-type": "application/json"}
    return httpx.post(served.url + path, content=data, headers=headers, timeout=30)


def grpc_reweight(served: Served, msg: pb.ReweightRequest) -> pb.ReweightResponse:
    with grpc.insecure_channel(served.target) as channel:
        call = channel.unary_unary(
            REWEIGHT,
            request_serializer=pb.ReweightRequest.SerializeToString,
            response_deserializer=pb.ReweightResponse.FromString,
        )
        return call(msg, metadata=tuple(AUTH.items()), timeout=30)


def _finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)


# -- item 3: float extremes ------------------------------------------------------------------


@pytest.mark.parametrize(
    "rewards",
    [[3e38, -3e38, 0.0], [1e20, 0.0, -1e20], [1.7e308, -1.7e308, 0.0], [1e-300, 0.0, -1e-300]],
)
@pytest.mark.parametrize("method", ["none", "dra", "mmr"])
def test_float_extremes_are_right_or_refused_the_same_on_both_transports(
    keyed: Served, rewards: list[float], method: str
) -> None:
    body = {
        "method": method,
        "advantages": "grpo",
        "groups": [{"rewards": rewards, "embeddings": UNIT}],
    }
    http = post(keyed, body)
    assert http.status_code in (200, 422), http.text
    msg = pb.ReweightRequest(method=method, advantages="grpo")
    g = msg.groups.add()
    g.rewards.extend(rewards)
    g.embeddings.dim = 2
    g.embeddings.values.extend(v for row in UNIT for v in row)
    if http.status_code == 422:
        err = error_shape(http.json())
        assert err["field"] and "rewards" in err["field"], err
        with pytest.raises(grpc.RpcError) as info:
            grpc_reweight(keyed, msg)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "rewards" in dict(info.value.trailing_metadata() or ()).get(FIELD_KEY, "")
        return
    group = http.json()["groups"][0]
    assert _finite(group["rewards"]) and _finite(group["advantages"]), group
    over_grpc = grpc_reweight(keyed, msg).groups[0]
    assert list(over_grpc.rewards) == pytest.approx(group["rewards"], rel=1e-6)
    assert list(over_grpc.advantages) == pytest.approx(group["advantages"], rel=1e-6, abs=1e-9)
    if method == "none":  # the reweighting is the identity: grpo's formula in float64
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
        want = [(r - mean) / (std + 1e-4) for r in rewards]
        assert group["advantages"] == pytest.approx(want, rel=1e-6, abs=1e-12), group


# -- item 9: values that used to raise inside the service -------------------------------------


def test_huge_integer_literal_is_a_422_naming_the_field(keyed: Served) -> None:
    huge = "9" * 401
    for field, rewards, embeddings in (
        ("rewards", f"[{huge}, 0]", "[[1, 0], [0, 1]]"),
        ("embeddings", "[1, 0]", f"[[{huge}, 0], [0, 1]]"),
    ):
        group = f'{{"rewards": {rewards}, "embeddings": {embeddings}}}'
        response = post(keyed, f'{{"method": "none", "groups": [{group}]}}'.encode())
        assert response.status_code == 422, response.text
        assert field in (error_shape(response.json())["field"] or "")


def test_lone_surrogate_is_a_422_naming_the_text(keyed: Served) -> None:
    raw = b'{"groups": [{"rewards": [1, 0], "completions": ["fine", "bad \\ud800 text"]}]}'
    response = post(keyed, raw)
    assert response.status_code == 422, response.text
    assert error_shape(response.json())["field"] == "groups[0].completions[1]"
    response = post(keyed, b'{"inputs": ["ok", "\\udfff"]}', "/v1/embed")
    assert response.status_code == 422, response.text
    assert error_shape(response.json())["field"] == "inputs[1]"


# -- item 10: the contract -------------------------------------------------------------------


def test_invalid_utf8_and_deep_nesting_get_the_documented_error_shape(keyed: Served) -> None:
    bad_utf8 = b'{"groups": [{"rewards": [1], "completions": ["\xff\xfe"]}]}'
    response = post(keyed, bad_utf8)
    assert 400 <= response.status_code < 500, response.text
    error_shape(response.json())
    deep = b'{"groups": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = post(keyed, deep)
    assert 400 <= response.status_code < 500, response.text
    error_shape(response.json())


def test_garbage_grpc_bytes_are_invalid_argument(keyed: Served) -> None:
    with grpc.insecure_channel(keyed.target) as channel:
        call = channel.unary_unary(REWEIGHT)  # raw bytes in and out
        for garbage in (b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x12\xff\xff\xff\xff\x0f"):
            with pytest.raises(grpc.RpcError) as info:
                call(garbage, metadata=tuple(AUTH.items()), timeout=10)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()


def test_garbage_bytes_on_the_member_stream_end_it_with_invalid_argument(keyed: Served) -> None:
    """SubmitMembers (stream-stream): a message that does not decode ends the stream with
    INVALID_ARGUMENT, not UNKNOWN; the stream's valid members before it are still answered."""
    good = pb.SubmitMemberRequest(group_id="garbage-stream", member_id="a", group_size=1,
                                  reward=1.0, embedding=pb.Vector(values=[1.0, 0.0]))  # fmt: skip
    with grpc.insecure_channel(keyed.target) as channel:
        call = channel.stream_stream("/reweighter.v1.Reweighter/SubmitMembers")  # raw bytes
        for i, garbage in enumerate((b"\xff\xff\xff\xff", b"\x12\xff\xff\xff\xff\x0f")):
            good.group_id = f"garbage-stream-{i}"
            answers = call(
                iter([good.SerializeToString(), garbage]),
                metadata=tuple(AUTH.items()),
                timeout=10,
            )
            got = []
            with pytest.raises(grpc.RpcError) as info:
                for answer in answers:
                    got.append(pb.MemberResult.FromString(answer))
            assert [(g.group_id, g.member_id, g.complete) for g in got] == [
                (good.group_id, "a", True)
            ]
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
            assert "not a valid protobuf message" in (info.value.details() or "")


def test_messages_name_the_field_once(keyed: Served) -> None:
    response = post(keyed, {"method": "nope", "groups": [{"rewards": [1], "embeddings": [[1]]}]})
    err = error_shape(response.json())
    assert response.status_code == 422 and err["field"] == "method"
    assert not err["message"].startswith("method:"), err
    msg = pb.ReweightRequest(method="nope")
    g = msg.groups.add()
    g.rewards.append(1.0)
    g.embeddings.dim = 1
    g.embeddings.values.append(1.0)
    with pytest.raises(grpc.RpcError) as info:
        grpc_reweight(keyed, msg)
    details = info.value.details()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "method: method:" not in details and details.count("method:") <= 1, details


def test_lambda_as_a_string_is_refused_on_both_transports(keyed: Served) -> None:
    group = {"rewards": [1, 0], "embeddings": [[1, 0], [0, 1]]}
    response = post(keyed, {"method": "mmr", "params": {"lambda": "0.5"}, "groups": [group]})
    assert response.status_code == 422, response.text
    assert error_shape(response.json())["field"] == "params.lambda"
    msg = pb.ReweightRequest(method="mmr")
    msg.params.CopyFrom(struct_pb2.Struct())
    msg.params.update({"lambda": "0.5"})
    g = msg.groups.add()
    g.rewards.extend([1.0, 0.0])
    g.embeddings.dim = 2
    g.embeddings.values.extend([1.0, 0.0, 0.0, 1.0])
    with pytest.raises(grpc.RpcError) as info:
        grpc_reweight(keyed, msg)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(info.value.trailing_metadata() or ()).get(FIELD_KEY) == "params.lambda"


def _resolve(spec: dict, node: dict) -> dict:
    while "$ref" in node:
        node = spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _branches(spec: dict, node: dict) -> list[dict]:
    node = _resolve(spec, node)
    subs = node.get("anyOf") or node.get("oneOf") or []
    return [node] + [b for s in subs for b in _branches(spec, s)]


def test_openapi_documents_enums_and_minimums(keyed: Served) -> None:
    spec = httpx.get(keyed.url + "/openapi.json", timeout=10).json()
    body = spec["paths"]["/v1/reweight"]["post"]["requestBody"]["content"]["application/json"]
    req = _resolve(spec, body["schema"])
    props = req["properties"]

    def enum(node: dict) -> set:
        return {v for b in _branches(spec, node) for v in b.get("enum", [])} | {
            b["const"] for b in _branches(spec, node) if "const" in b
        }

    assert {"dra", "mmr", "none"} <= enum(props["method"])
    assert {"grpo", "dr_grpo", "none"} <= enum(props["advantages"])
    assert props["groups"].get("minItems", 0) >= 1
    group = _resolve(spec, props["groups"]["items"])
    assert any(b.get("minItems", 0) >= 1 for b in _branches(spec, group["properties"]["rewards"]))
    completions = _branches(spec, group["properties"]["completions"])
    assert any(b.get("type") == "array" and b.get("minItems", 0) >= 1 for b in completions)
    # lambda: a number in [0, 1] or "adaptive", stated where generated clients look
    lam = [b for p in _properties(req, "lambda") for b in _branches(spec, p)]
    assert any(b.get("minimum") == 0 and b.get("maximum") == 1 for b in lam), lam
    assert any("adaptive" in b.get("enum", []) or b.get("const") == "adaptive" for b in lam)


def _properties(node: object, name: str) -> list[dict]:
    """Every schema of a property called `name`, anywhere below `node`."""
    found: list[dict] = []
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict) and isinstance(props.get(name), dict):
            found.append(props[name])
        for v in node.values():
            found += _properties(v, name)
    elif isinstance(node, list):
        for v in node:
            found += _properties(v, name)
    return found
