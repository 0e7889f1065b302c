"""Protobuf <-> the engine's types, both directions, and errors <-> status + trailing metadata.

The servicer uses the `proto_to_*` request / `*_to_proto` result halves; the gRPC client uses
the opposite halves, so a round trip is the identity on `reweighter.types`. Nothing here judges
a request: the engine does, so both transports reject the same inputs with the same messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import numpy as np
from google.protobuf import json_format

from ...assembly.types import MemberReason, MemberResult, MemberSubmission
from ...errors import ConnectionFailed, InvalidInput, ReweighterError, error_from
from ...types import (
    DEFAULT_METHOD,
    AdvantageKind,
    EmbedResult,
    EngineInfo,
    Group,
    GroupResult,
    GroupStats,
    ReweightRequest,
    ReweightResult,
)
from .._proto.reweighter.v1 import reweighter_pb2 as pb

DEFAULT_ADVANTAGES = AdvantageKind.NONE
ERROR_TYPE_KEY = "reweighter-error-type"
ERROR_FIELD_KEY = "reweighter-error-field"

# -- gRPC (protobuf) -----------------------------------------------------------------------


def proto_to_request(msg: pb.ReweightRequest) -> ReweightRequest:
    params = json_format.MessageToDict(msg.params) if msg.HasField("params") else {}
    groups = []
    for i, g in enumerate(msg.groups):
        embeddings = None
        if g.HasField("embeddings"):
            embeddings = _unpack_matrix(g.embeddings.values, g.embeddings.dim)
            if embeddings is None:
                raise InvalidInput(
                    f"{len(g.embeddings.values)} packed values do not divide into vectors of "
                    f"dim {g.embeddings.dim}",
                    field=f"groups[{i}].embeddings",
                )
        groups.append(
            Group(
                rewards=list(g.rewards),
                # proto3 cannot tell an empty list from an absent one: no texts means "not given"
                completions=list(g.completions) if len(g.completions) else None,
                embeddings=embeddings,
                id=g.id if g.HasField("id") else None,
            )
        )
    return ReweightRequest(
        groups=groups,
        method=msg.method or DEFAULT_METHOD,
        params=params,
        advantages=msg.advantages or DEFAULT_ADVANTAGES,
    )


def request_to_proto(request: ReweightRequest) -> pb.ReweightRequest:
    msg = pb.ReweightRequest(method=str(request.method), advantages=str(request.advantages))
    if request.params:
        msg.params.update(dict(request.params))
    for g in request.groups:
        pg = msg.groups.add()
        pg.rewards.extend(float(r) for r in g.rewards)
        if g.id is not None:
            pg.id = g.id
        if g.completions is not None:
            pg.completions.extend(g.completions)
        if g.embeddings is not None:
            arr = np.asarray(g.embeddings, dtype=np.float32)
            pg.embeddings.dim = int(arr.shape[1]) if arr.ndim == 2 else 0
            pg.embeddings.values.extend(arr.ravel().tolist())
    return msg


def result_to_proto(result: ReweightResult) -> pb.ReweightResponse:
    msg = pb.ReweightResponse(method=result.method)
    if result.model is not None:
        msg.model = result.model
    for g in result.groups:
        pg = msg.groups.add()
        if g.id is not None:
            pg.id = g.id
        pg.rewards.extend(g.rewards)
        if g.advantages is not None:
            pg.advantages.extend(g.advantages)
        pg.stats.mean_similarity = g.stats.mean_similarity
        if g.stats.lambda_ is not None:
            setattr(pg.stats, "lambda", g.stats.lambda_)  # noqa: B010 - a Python keyword
    return msg


def proto_to_result(msg: pb.ReweightResponse) -> ReweightResult:
    return ReweightResult(
        method=msg.method,
        model=msg.model if msg.HasField("model") else None,
        groups=[
            GroupResult(
                id=g.id if g.HasField("id") else None,
                rewards=list(g.rewards),
                # groups are never empty, so no advantages means none were asked for
                advantages=list(g.advantages) if len(g.advantages) else None,
                stats=GroupStats(
                    mean_similarity=g.stats.mean_similarity,
                    lambda_=getattr(g.stats, "lambda") if g.stats.HasField("lambda") else None,
                ),
            )
            for g in msg.groups
        ],
    )


def proto_embed_inputs(msg: pb.EmbedRequest) -> list[str]:
    if msg.HasField("normalize") and not msg.normalize:
        raise InvalidInput(
            "only normalize=true is supported: the encoder returns unit vectors", field="normalize"
        )
    return list(msg.inputs)


def embed_to_proto(result: EmbedResult) -> pb.EmbedResponse:
    arr = np.asarray(result.embeddings, dtype=np.float32)
    msg = pb.EmbedResponse(model=result.model, dim=result.dim)
    msg.embeddings.extend(arr.ravel().tolist())
    return msg


def proto_to_embed(msg: pb.EmbedResponse) -> EmbedResult:
    arr = np.asarray(msg.embeddings, dtype=np.float32).reshape(-1, msg.dim or 1)
    return EmbedResult(model=msg.model, dim=msg.dim, embeddings=arr)


def info_to_proto(info: EngineInfo) -> pb.InfoResponse:
    msg = pb.InfoResponse(
        version=info["version"],
        long_text=info["long_text"],
        ready=info["ready"],
        advantages=info["advantages"],
    )
    if info["model"] is not None:
        msg.model = info["model"]
    if info["device"] is not None:
        msg.device = str(info["device"])
    if info["dim"] is not None:
        msg.dim = int(info["dim"])
    if info.get("precision") is not None:
        msg.precision = str(info["precision"])
    for name, spec in info["methods"].items():
        msg.methods[name].update(dict(spec))
    for name, value in info["limits"].items():
        msg.limits[name] = int(value)
    return msg


def proto_to_info(msg: pb.InfoResponse) -> EngineInfo:
    return {
        "version": msg.version,
        "model": msg.model if msg.HasField("model") else None,
        "dim": msg.dim if msg.HasField("dim") else None,
        "device": msg.device if msg.HasField("device") else None,
        "precision": msg.precision if msg.HasField("precision") else None,
        "ready": msg.ready,
        "long_text": msg.long_text,
        "methods": {k: json_format.MessageToDict(v) for k, v in msg.methods.items()},  # type: ignore[misc]
        "advantages": list(msg.advantages),
        "limits": dict(msg.limits),
    }


def error_metadata(exc: ReweighterError) -> tuple[tuple[str, str], ...]:
    meta = [(ERROR_TYPE_KEY, type(exc).__name__)]
    if exc.field:
        meta.append((ERROR_FIELD_KEY, exc.field))
    return tuple(meta)


def error_from_rpc(e: grpc.RpcError) -> ReweighterError:
    """A failed call as the server's reweighter.errors class, rebuilt from trailing metadata;
    a status without it (a proxy, a dead server) keeps its code."""
    code = e.code() if hasattr(e, "code") else None
    trailing = dict(e.trailing_metadata() or ()) if hasattr(e, "trailing_metadata") else {}
    kind = trailing.get(ERROR_TYPE_KEY)
    field = trailing.get(ERROR_FIELD_KEY)
    details = (e.details() if hasattr(e, "details") else None) or str(e)
    if field and details.startswith(f"{field}: "):
        details = details[len(field) + 2 :]
    if kind is not None:
        return error_from(kind, details, field)
    if code == grpc.StatusCode.UNAVAILABLE:
        return ConnectionFailed(details)
    name = code.name if code else None
    return ReweighterError(f"{name or 'gRPC error'}: {details}", grpc_code=name)


# -- helpers -------------------------------------------------------------------------------


def _unpack_matrix(values: Sequence[float], dim: int) -> np.ndarray | None:
    """A packed row-major matrix as [rows, dim] (the engine checks rows against the rewards)."""
    if dim <= 0 or len(values) % dim:
        return None
    return np.asarray(values, dtype=np.float32).reshape(-1, dim)


# -- group assembly ------------------------------------------------------------------------


def proto_to_submission(msg: pb.SubmitMemberRequest) -> MemberSubmission:
    which = msg.WhichOneof("input")
    return MemberSubmission(
        group_id=msg.group_id,
        member_id=msg.member_id,
        group_size=msg.group_size,
        reward=msg.reward,
        completion=msg.completion if which == "completion" else None,
        embedding=list(msg.embedding.values) if which == "embedding" else None,
        method=msg.method or DEFAULT_METHOD,
        params=json_format.MessageToDict(msg.params) if msg.HasField("params") else {},
        advantages=msg.advantages or DEFAULT_ADVANTAGES,
        timeout_s=msg.timeout_s if msg.HasField("timeout_s") else None,
    )


def submission_to_proto(sub: MemberSubmission) -> pb.SubmitMemberRequest:
    msg = pb.SubmitMemberRequest(
        group_id=sub.group_id,
        member_id=sub.member_id,
        group_size=sub.group_size,
        reward=float(sub.reward),
        method=str(sub.method),
        advantages=str(sub.advantages),
    )
    if sub.completion is not None:
        msg.completion = sub.completion
    if sub.embedding is not None:
        msg.embedding.values.extend(np.asarray(sub.embedding, dtype=np.float32).ravel().tolist())
    if sub.params:
        msg.params.update(dict(sub.params))
    if sub.timeout_s is not None:
        msg.timeout_s = float(sub.timeout_s)
    return msg


def member_result_to_proto(r: MemberResult) -> pb.MemberResult:
    msg = pb.MemberResult(
        group_id=r.group_id,
        member_id=r.member_id,
        reward=r.reward,
        raw_reward=r.raw_reward,
        complete=r.complete,
        members=r.members,
        round=r.round,
    )
    if r.advantage is not None:
        msg.advantage = r.advantage
    if r.reason is not None:
        msg.reason = r.reason
    if r.stats is not None:
        msg.stats.mean_similarity = r.stats.mean_similarity
        if r.stats.lambda_ is not None:
            setattr(msg.stats, "lambda", r.stats.lambda_)  # noqa: B010 - a Python keyword
    return msg


def member_error_to_proto(msg: pb.SubmitMemberRequest, exc: ReweighterError) -> pb.MemberResult:
    """A failed member on the SubmitMembers stream (the stream itself goes on)."""
    out = pb.MemberResult(group_id=msg.group_id, member_id=msg.member_id)
    out.error.type = type(exc).__name__
    out.error.code = exc.grpc_code
    out.error.message = exc.message
    if exc.field:
        out.error.field = exc.field
    return out


def proto_to_member_result(msg: pb.MemberResult) -> MemberResult | ReweighterError:
    """The member's result, or (stream only) its error rebuilt as the server's class."""
    if msg.HasField("error"):
        e = msg.error
        return error_from(e.type, e.message, e.field if e.HasField("field") else None)
    stats = None
    if msg.HasField("stats"):
        lam = getattr(msg.stats, "lambda") if msg.stats.HasField("lambda") else None
        stats = GroupStats(mean_similarity=msg.stats.mean_similarity, lambda_=lam)
    return MemberResult(
        group_id=msg.group_id,
        member_id=msg.member_id,
        reward=msg.reward,
        raw_reward=msg.raw_reward,
        advantage=msg.advantage if msg.HasField("advantage") else None,
        complete=msg.complete,
        reason=MemberReason(msg.reason) if msg.HasField("reason") else None,
        stats=stats,
        members=msg.members,
        round=msg.round,
    )
