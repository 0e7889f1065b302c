"""The one module that maps wire formats to the engine's types and back (both directions).

Servers use the `*_to_request` / `result_to_*` halves; clients use the opposite halves, so a
round trip through either transport is the identity on `reweighter.types`. Nothing here judges a
request: the engine does, so both transports reject the same inputs with the same messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf import json_format, struct_pb2

from .. import errors
from ..errors import InvalidInput, ReweighterError
from ..types import (
    EmbedResult,
    Group,
    GroupResult,
    GroupStats,
    ReweightRequest,
    ReweightResult,
)
from ._proto.reweighter.v1 import reweighter_pb2 as pb
from .schemas import EmbedIn, ReweightIn

DEFAULT_METHOD = "dra"
DEFAULT_ADVANTAGES = "none"
ERROR_TYPE_KEY = "reweighter-error-type"
ERROR_FIELD_KEY = "reweighter-error-field"

# -- HTTP (JSON) ---------------------------------------------------------------------------


def http_to_request(body: ReweightIn) -> ReweightRequest:
    return ReweightRequest(
        groups=[
            Group(rewards=g.rewards, completions=g.completions, embeddings=g.embeddings, id=g.id)
            for g in body.groups
        ],
        method=body.method,
        params=body.params,
        advantages=body.advantages,  # type: ignore[arg-type]  # the engine names bad kinds
    )


def request_to_http(request: ReweightRequest) -> dict[str, Any]:
    groups = []
    for g in request.groups:
        out: dict[str, Any] = {"rewards": [float(r) for r in g.rewards]}
        if g.id is not None:
            out["id"] = g.id
        if g.completions is not None:
            out["completions"] = list(g.completions)
        if g.embeddings is not None:
            out["embeddings"] = np.asarray(g.embeddings, dtype=np.float64).tolist()
        groups.append(out)
    return {
        "method": request.method,
        "params": dict(request.params),
        "advantages": request.advantages,
        "groups": groups,
    }


def result_to_http(result: ReweightResult) -> dict[str, Any]:
    groups = []
    for g in result.groups:
        stats: dict[str, Any] = {"mean_similarity": g.stats.mean_similarity}
        if g.stats.lambda_ is not None:
            stats["lambda"] = g.stats.lambda_
        out: dict[str, Any] = {"id": g.id, "rewards": g.rewards}
        if g.advantages is not None:
            out["advantages"] = g.advantages
        out["stats"] = stats
        groups.append(out)
    return {"method": result.method, "model": result.model, "groups": groups}


def http_to_result(body: Mapping[str, Any]) -> ReweightResult:
    return ReweightResult(
        method=body["method"],
        model=body.get("model"),
        groups=[
            GroupResult(
                id=g.get("id"),
                rewards=[float(x) for x in g["rewards"]],
                advantages=(
                    [float(x) for x in g["advantages"]] if g.get("advantages") is not None else None
                ),
                stats=GroupStats(
                    mean_similarity=float(g["stats"]["mean_similarity"]),
                    lambda_=g["stats"].get("lambda"),
                ),
            )
            for g in body["groups"]
        ],
    )


def http_embed_inputs(body: EmbedIn) -> list[str]:
    if not body.normalize:
        raise InvalidInput(
            "only normalize=true is supported: the encoder returns unit vectors", field="normalize"
        )
    return [body.inputs] if isinstance(body.inputs, str) else body.inputs


def embed_to_http(result: EmbedResult) -> dict[str, Any]:
    return {
        "model": result.model,
        "dim": result.dim,
        "embeddings": np.asarray(result.embeddings, dtype=np.float32).tolist(),
    }


def http_to_embed(body: Mapping[str, Any]) -> EmbedResult:
    dim = int(body["dim"])
    arr = np.asarray(body["embeddings"], dtype=np.float32).reshape(-1, dim)
    return EmbedResult(model=body["model"], dim=dim, embeddings=arr)


def error_to_http(exc: ReweighterError) -> dict[str, Any]:
    return {"error": {"message": exc.message, "field": exc.field, "type": type(exc).__name__}}


def validation_field(error: Mapping[str, Any], known: set[str]) -> str | None:
    """A pydantic error's location as the engine's dotted path: ("body","groups",0,"rewards") ->
    "groups[0].rewards". Union-branch tags that pydantic inserts ("float", "int") are dropped;
    an unknown key (extra="forbid") is kept, since it is the field at fault."""
    loc = list(error.get("loc", ()))
    out = ""
    for i, part in enumerate(loc):
        last_extra = error.get("type") == "extra_forbidden" and i == len(loc) - 1
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in known or (last_extra and part != "body"):
            out += f".{part}" if out else str(part)
    return out or None


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
        advantages=msg.advantages or DEFAULT_ADVANTAGES,  # type: ignore[arg-type]
    )


def request_to_proto(request: ReweightRequest) -> pb.ReweightRequest:
    msg = pb.ReweightRequest(method=request.method, advantages=request.advantages)
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


def info_to_proto(info: Mapping[str, Any]) -> pb.InfoResponse:
    msg = pb.InfoResponse(
        version=str(info.get("version", "")),
        long_text=str(info.get("long_text", "")),
        ready=bool(info.get("ready", False)),
        advantages=list(info.get("advantages", [])),
    )
    for key in ("model", "device"):
        if info.get(key) is not None:
            setattr(msg, key, str(info[key]))
    if info.get("dim") is not None:
        msg.dim = int(info["dim"])
    for name, spec in info.get("methods", {}).items():
        msg.methods[name].update(spec)
    for name, value in info.get("limits", {}).items():
        msg.limits[name] = int(value)
    return msg


def proto_to_info(msg: pb.InfoResponse) -> dict[str, Any]:
    return {
        "version": msg.version,
        "model": msg.model if msg.HasField("model") else None,
        "dim": msg.dim if msg.HasField("dim") else None,
        "device": msg.device if msg.HasField("device") else None,
        "ready": msg.ready,
        "long_text": msg.long_text,
        "methods": {k: _struct_to_py(v) for k, v in msg.methods.items()},
        "advantages": list(msg.advantages),
        "limits": dict(msg.limits),
    }


def error_metadata(exc: ReweighterError) -> tuple[tuple[str, str], ...]:
    meta = [(ERROR_TYPE_KEY, type(exc).__name__)]
    if exc.field:
        meta.append((ERROR_FIELD_KEY, exc.field))
    return tuple(meta)


# -- errors (clients) ----------------------------------------------------------------------


def error_from(type_name: str | None, message: str, field: str | None) -> ReweighterError:
    """Rebuild the server's error as the same reweighter.errors class, with its field."""
    cls = getattr(errors, type_name or "", None)
    if not (isinstance(cls, type) and issubclass(cls, ReweighterError)):
        cls = ReweighterError
    return cls(message, field=field)


# -- helpers -------------------------------------------------------------------------------


def _unpack_matrix(values: Sequence[float], dim: int) -> np.ndarray | None:
    """A packed row-major matrix as [rows, dim] (the engine checks rows against the rewards)."""
    if dim <= 0 or len(values) % dim:
        return None
    return np.asarray(values, dtype=np.float32).reshape(-1, dim)


def _struct_to_py(msg: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(msg)
