"""One source per wire message: the proto, the message dataclasses (reweighter.types) and the
HTTP models derived from them hold the same fields, and every message survives a round trip
through each form (protobuf both ways, the client's JSON body into the server's model, an
answer's JSON into the client's result)."""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from typing import Any

import numpy as np
import pytest
from google.protobuf.descriptor import Descriptor

from reweighter.errors import InvalidInput
from reweighter.types import (
    EmbedRequest,
    EmbedResult,
    EngineInfo,
    Group,
    GroupResult,
    GroupStats,
    MemberReason,
    MemberResult,
    MemberSubmission,
    ReweightRequest,
    ReweightResult,
)
from reweighter.wire import http
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2 as pb
from reweighter.wire.common import wire_name
from reweighter.wire.grpc import PACKING, from_proto, to_proto

PAIRS: dict[Any, Any] = {
    pb.ReweightRequest: ReweightRequest,
    pb.Group: Group,
    pb.ReweightResponse: ReweightResult,
    pb.GroupResult: GroupResult,
    pb.GroupStats: GroupStats,
    pb.SubmitMemberRequest: MemberSubmission,
    pb.MemberResult: MemberResult,
    pb.InfoResponse: EngineInfo,
    pb.EmbedRequest: EmbedRequest,
    pb.EmbedResponse: EmbedResult,
}
"""Each proto message and the one definition it is derived from."""
PROTO_ONLY = {("MemberResult", "error")}
"""Fields only gRPC has, each with its reason: a member's error on the SubmitMembers stream
(HTTP answers a member's error with the call's status, as the unary RPC does)."""
HAND_MAPPED = {"InfoRequest", "MemberError"}
"""Messages with no dataclass: InfoRequest is empty, MemberError is the stream's error
(PROTO_ONLY)."""


def names_of(cls: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {wire_name(f.name) for f in dataclasses.fields(cls)}
    return set(cls.__annotations__)  # a TypedDict


def http_names(cls: Any) -> set[str]:
    """The JSON names of the message's request model (less what the path carries) and of its
    answer model."""
    if not dataclasses.is_dataclass(cls):
        return set(cls.__annotations__)  # EngineInfo is its own HTTP model (response_model)
    inbound = cls in (ReweightRequest, Group, MemberSubmission, EmbedRequest)
    model = http.model(cls, inbound)
    path = {wire_name(f.name) for f in dataclasses.fields(cls) if f.metadata.get("in_path")}
    return {f.alias or n for n, f in model.model_fields.items()} | (path if inbound else set())


def parity(descriptor: Descriptor, names: set[str]) -> list[str]:
    """What differs between a proto message's fields and a message's names."""
    proto = {f.name for f in descriptor.fields} - {f for m, f in PROTO_ONLY if m == descriptor.name}
    return [f"{descriptor.name}.{n}: only in the proto" for n in sorted(proto - names)] + [
        f"{descriptor.name}.{n}: no proto field" for n in sorted(names - proto)
    ]


@pytest.mark.parametrize("pb_class", PAIRS, ids=lambda c: c.DESCRIPTOR.name)
def test_every_proto_field_has_its_dataclass_and_http_counterpart_and_back(pb_class: Any) -> None:
    cls = PAIRS[pb_class]
    assert parity(pb_class.DESCRIPTOR, names_of(cls)) == []
    assert parity(pb_class.DESCRIPTOR, http_names(cls)) == []


def test_every_proto_message_is_paired_or_named() -> None:
    """A message added to the proto must be paired with its definition here (or named, with a
    reason, as hand-mapped): the parity test cannot miss it."""
    file = pb.DESCRIPTOR
    paired = {c.DESCRIPTOR.name for c in PAIRS}
    packed = {name.rsplit(".", 1)[-1] for name in PACKING}
    assert set(file.message_types_by_name) == paired | HAND_MAPPED | (packed - {"Struct"})


def test_the_parity_check_finds_a_field_on_one_side_only() -> None:
    @dataclasses.dataclass
    class Extra:
        mean_similarity: float
        lambda_: float | None
        effective_size: float | None
        distinct_answers: int | None
        classes: int | None
        skew: float

    assert parity(pb.GroupStats.DESCRIPTOR, names_of(Extra)) == ["GroupStats.skew: no proto field"]
    assert parity(pb.GroupStats.DESCRIPTOR, names_of(GroupStats) - {"lambda"}) == [
        "GroupStats.lambda: only in the proto"
    ]


REQUEST = ReweightRequest(
    groups=[
        Group([1.0, 0.0, 2], completions=["a", "b", "c"], id="g0"),
        Group(
            [0.5, 0.25],
            embeddings=np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32),
            answers=["4", None],
            prompt_key="p-1",
            quality=[0.5, -0.75],
        ),
    ],
    method="mmr",
    params={"lambda": 0.5},
    advantages="grpo",
    advantage_params={"k": 2},
    step=7,
)
RESULT = ReweightResult(
    method="mmr",
    model="m",
    groups=[
        GroupResult("g0", [1.0, 0.5], [0.5, -0.5], GroupStats(0.25, 0.5, 1.5, 2, 2)),
        GroupResult(None, [1.0], None, GroupStats(1.0, None)),
    ],
)
MEMBERS = [
    MemberSubmission("g/1", "m0", 4, 0.5, completion="text", method="mmr",
                     params={"lambda": "adaptive"}, advantages="dr_grpo", timeout_s=2.5,
                     reuse_ids=True, answer="42"),
    MemberSubmission("g", "m1", 2, 1, embedding=np.array([0.5, 0.25], dtype=np.float32)),
]  # fmt: skip
ANSWERS = [
    MemberResult("g", "m0", 0.7, 0.5, -0.1, True, None, GroupStats(0.2, 0.3), 4, 2),
    MemberResult("g", "m1", 0.5, 0.5, None, False, MemberReason.SHORT, None, 1),
]
EMBEDS = [EmbedRequest(["a", "b"]), EmbedRequest(["only"], normalize=True)]
EMBEDDED = EmbedResult("m", 3, np.array([[0.5, 0.25, 0.0], [1.0, 0.0, -1.0]], dtype=np.float32))


def canon(x: Any) -> Any:
    """A message as plain values: numbers as floats (an int reward is a JSON number and a proto
    double), arrays as lists, names as strings (a method is a Method or its string)."""
    if dataclasses.is_dataclass(x):
        return type(x).__name__, {f.name: canon(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, StrEnum):
        return x.value
    if isinstance(x, np.ndarray | list | tuple):
        return [canon(v) for v in x]
    if isinstance(x, dict):
        return {k: canon(v) for k, v in x.items()}
    if isinstance(x, int | float | np.number) and not isinstance(x, bool):
        return float(x)
    return x


def same(a: Any, b: Any) -> bool:
    return bool(canon(a) == canon(b))


@pytest.mark.parametrize(
    ("message", "pb_class"),
    [(REQUEST, pb.ReweightRequest), (RESULT, pb.ReweightResponse)]
    + [(m, pb.SubmitMemberRequest) for m in MEMBERS]
    + [(a, pb.MemberResult) for a in ANSWERS]
    + [(e, pb.EmbedRequest) for e in EMBEDS]
    + [(EMBEDDED, pb.EmbedResponse)],
)
def test_a_message_survives_protobuf_both_ways(message: Any, pb_class: Any) -> None:
    wire = pb_class.FromString(to_proto(message, pb_class).SerializeToString())
    back = from_proto(wire, type(message))
    assert same(back, message)
    if isinstance(message, MemberResult) and message.reason is not None:
        assert type(back.reason) is MemberReason


@pytest.mark.parametrize("message", [REQUEST, *MEMBERS, *EMBEDS])
def test_a_request_survives_the_clients_body_and_the_servers_model(message: Any) -> None:
    model = http.model(type(message), inbound=True)
    path = {"group_id": message.group_id} if isinstance(message, MemberSubmission) else {}
    parsed = model.model_validate_json(json.dumps(http.body(message)))
    assert same(http.to_engine(parsed, **path), message)


@pytest.mark.parametrize("message", [RESULT, *ANSWERS, EMBEDDED])
def test_an_answer_survives_the_servers_model_and_the_clients_parse(message: Any) -> None:
    data = http.answer(message).model_dump_json(by_alias=True, exclude_none=False)
    parsed = http.parse(type(message), data.encode())
    assert same(parsed, message)
    if isinstance(message, MemberResult) and message.reason is not None:
        assert type(parsed.reason) is MemberReason


def test_answers_leave_out_what_is_none_only_where_documented() -> None:
    out = json.loads(http.answer(RESULT).model_dump_json(by_alias=True))
    assert out["groups"][0]["stats"] == {
        "mean_similarity": 0.25, "lambda": 0.5, "effective_size": 1.5, "distinct_answers": 2,
        "classes": 2,
    }
    assert out["groups"][1]["stats"] == {"mean_similarity": 1.0}  # none of the optional ones
    assert "advantages" not in out["groups"][1] and out["groups"][1]["id"] is None
    member = json.loads(http.answer(ANSWERS[1]).model_dump_json(by_alias=True))
    assert member["advantage"] is None and member["stats"] is None and member["reason"] == "short"


def test_proto3_defaults_and_absences_are_the_dataclass_defaults() -> None:
    bare = from_proto(pb.ReweightRequest(groups=[pb.Group(rewards=[1.0])]), ReweightRequest)
    assert bare.method == "dra" and bare.advantages == "none" and bare.params == {}
    assert bare.groups[0].completions is None and bare.groups[0].embeddings is None
    assert bare.groups[0].id is None
    member = from_proto(pb.SubmitMemberRequest(group_id="g", member_id="m"), MemberSubmission)
    assert member.timeout_s is None and member.completion is None and member.group_size == 0


def test_a_packed_matrix_that_does_not_divide_names_its_field() -> None:
    msg = pb.ReweightRequest(groups=[pb.Group(rewards=[1.0]), pb.Group(rewards=[1.0, 2.0])])
    msg.groups[1].embeddings.dim = 2
    msg.groups[1].embeddings.values.extend([1.0, 2.0, 3.0])
    with pytest.raises(InvalidInput) as e:
        from_proto(msg, ReweightRequest)
    assert e.value.field == "groups[1].embeddings"


def test_embeddings_travel_as_rows_in_json_and_one_packed_array_in_the_proto() -> None:
    out = json.loads(http.answer(EMBEDDED).model_dump_json())
    assert out == {"model": "m", "dim": 3, "embeddings": [[0.5, 0.25, 0.0], [1.0, 0.0, -1.0]]}
    msg = to_proto(EMBEDDED, pb.EmbedResponse)
    assert list(msg.embeddings) == [0.5, 0.25, 0.0, 1.0, 0.0, -1.0] and msg.dim == 3
    back = from_proto(msg, EmbedResult)
    assert back.embeddings.dtype == np.float32 and back.embeddings.shape == (2, 3)
    parsed = http.parse(EmbedResult, json.dumps(out).encode())
    assert parsed.embeddings.dtype == np.float32 and parsed.embeddings.shape == (2, 3)


def test_an_embed_request_takes_one_text_or_a_list_and_refuses_normalize_false() -> None:
    one = http.to_engine(http.EmbedIn.model_validate_json(b'{"inputs": "x"}'))
    assert one.texts() == ["x"] and one.normalize is True
    assert from_proto(to_proto(one, pb.EmbedRequest), EmbedRequest).texts() == ["x"]
    bare = from_proto(pb.EmbedRequest(inputs=["a"]), EmbedRequest)
    assert bare.normalize is True  # proto3 `optional`, absent: the dataclass default
    for message in (EmbedRequest(["a"], normalize=False),
                    from_proto(pb.EmbedRequest(inputs=["a"], normalize=False), EmbedRequest)):
        with pytest.raises(InvalidInput) as e:
            message.texts()
        assert e.value.field == "normalize"


def test_a_stored_round_answers_every_groupstats_field_the_wire_has() -> None:
    """assembly/records.py stores the wire's GroupStats as it is: a field added to it is kept
    through the store's JSON and answered, with no mapping to extend."""
    from reweighter.assembly.records import GroupMeta, RoundResult
    from reweighter.assembly.round import member_answer

    meta = GroupMeta(group_size=1, method="mmr", params={}, advantages="none",
                     input="embedding", dim=2)  # fmt: skip
    stats = GroupStats(0.25, 0.5, 1.5, 2, 3)
    stored = RoundResult(round=0, meta=meta, complete=True, ids=["a"], raw=[1.0],
                         digests=[{"embedding": "d"}], rewards=[0.5], advantages=None,
                         stats=stats)  # fmt: skip
    back = RoundResult.load(stored.dump())
    assert member_answer(back, "g", 0).stats == stats
    assert {f.name for f in dataclasses.fields(GroupStats)} <= set(
        json.loads(stored.dump())["stats"]
    )
    short = RoundResult(round=0, meta=meta, complete=False, ids=["a"], raw=[1.0],
                        digests=[{"embedding": "d"}], rewards=[1.0], advantages=None,
                        stats=None)  # fmt: skip
    assert member_answer(RoundResult.load(short.dump()), "g", 0).stats is None
