"""Protobuf <-> the wire messages of reweighter.types, both directions, by field name; and errors
<-> status + trailing metadata.

`to_proto(message, pb.X)` and `from_proto(msg, Message)` walk the protobuf descriptor and the
dataclass's fields together, so a field added to both (the same name; `lambda_` is `lambda`) is
carried with no code here. proto3's own rules are applied in one place: a scalar without
presence left at its zero value (an empty `method`) means the field's default, an empty
repeated field means absent when the field may be None. The servicer uses one half, the gRPC
client the other, so a round trip is the identity. Nothing here judges a request beyond its
shape: the engine does, so both transports reject the same inputs with the same messages.
"""

from __future__ import annotations

import dataclasses
import functools
import types as pytypes
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

import grpc
import numpy as np
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from typing_extensions import is_typeddict  # EngineInfo is typing_extensions' TypedDict

from ..errors import ConnectionFailed, InvalidInput, ReweighterError, error_from
from ..types import ReweightRequest
from ._proto.reweighter.v1 import reweighter_pb2 as pb
from .common import default_of, has_default, shape_matrices, wire_name

ERROR_TYPE_KEY = "reweighter-error-type"
ERROR_FIELD_KEY = "reweighter-error-field"
T = TypeVar("T")

# -- the messages' own packing: a packed matrix, one vector, a JSON object -----------------


def _pack_matrix(msg: Any, value: Any) -> None:
    arr = np.asarray(value, dtype=np.float32)
    msg.dim = int(arr.shape[1]) if arr.ndim == 2 else 0
    msg.values.extend(arr.ravel().tolist())


def _unpack_matrix(msg: Any, field: str) -> np.ndarray:
    """A packed row-major matrix as [rows, dim] (the engine checks rows against the rewards)."""
    if msg.dim <= 0 or len(msg.values) % msg.dim:
        raise InvalidInput(
            f"{len(msg.values)} packed values do not divide into vectors of dim {msg.dim}",
            field=field,
        )
    return np.asarray(msg.values, dtype=np.float32).reshape(-1, msg.dim)


def _pack_vector(msg: Any, value: Any) -> None:
    msg.values.extend(np.asarray(value, dtype=np.float32).ravel().tolist())


def _pack_struct(msg: Any, value: Any) -> None:
    msg.update(dict(value))


def _pack_answer(msg: Any, value: Any) -> None:
    if value is not None:
        msg.value = value


def _unpack_answer(msg: Any, _: str) -> str | None:
    """An answer as the wire's element: its string, or None when absent (none extracted)."""
    return msg.value if msg.HasField("value") else None


PACKING: dict[str, tuple[Callable[[Any, Any], None], Callable[[Any, str], Any]]] = {
    pb.Embeddings.DESCRIPTOR.full_name: (_pack_matrix, _unpack_matrix),
    pb.Vector.DESCRIPTOR.full_name: (_pack_vector, lambda m, _: list(m.values)),
    pb.Answer.DESCRIPTOR.full_name: (_pack_answer, _unpack_answer),
    "google.protobuf.Struct": (_pack_struct, lambda m, _: json_format.MessageToDict(m)),
}
"""Message types that carry a value of their own (an array, a mapping), not a dataclass."""


# -- to protobuf ---------------------------------------------------------------------------


def to_proto(message: Any, pb_class: type[T]) -> T:
    """`message` (a wire dataclass or an EngineInfo mapping) as a `pb_class` message."""
    msg = pb_class()
    _fill(msg, message)  # type: ignore[arg-type]
    return msg


def _fill(msg: Message, message: Any) -> None:
    for fd in msg.DESCRIPTOR.fields:
        value = _read(message, fd.name)
        if value is None:
            continue
        target = getattr(msg, fd.name)
        if fd.message_type is None:
            if _repeated(fd) and isinstance(value, str):
                value = [value]  # a text where the field takes texts (EmbedRequest.inputs)
            if _repeated(fd) and _matrix_width(message, fd.name):
                value = np.asarray(value, dtype=np.float32).ravel()  # one packed array
            if _repeated(fd):
                items = value.tolist() if hasattr(value, "tolist") else value  # numpy, torch
                target.extend(_scalar(fd, v) for v in items)
            else:
                setattr(msg, fd.name, _scalar(fd, value))
        elif fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            for k, v in value.items():
                if value_fd.message_type is None:
                    target[k] = _scalar(value_fd, v)
                else:
                    _fill_message(target[k], v)
        elif _repeated(fd):
            for v in value:
                _fill_message(target.add(), v)
        elif not (isinstance(value, Mapping) and not value):  # an empty Struct stays absent
            target.SetInParent()
            _fill_message(target, value)


def _fill_message(msg: Message, value: Any) -> None:
    packing = PACKING.get(msg.DESCRIPTOR.full_name)
    if packing is not None:
        packing[0](msg, value)
    else:
        _fill(msg, value)


def _matrix_width(message: Any, name: str) -> str | None:
    """The field holding a matrix field's width (`wire(matrix=...)`), None for other fields."""
    if not dataclasses.is_dataclass(message):
        return None
    for f in dataclasses.fields(message):
        if wire_name(f.name) == name:
            return f.metadata.get("matrix")  # type: ignore[no-any-return]
    return None


def _read(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, getattr(message, name + "_", None))


def _scalar(fd: FieldDescriptor, value: Any) -> Any:
    kind = fd.cpp_type
    if kind in (fd.CPPTYPE_DOUBLE, fd.CPPTYPE_FLOAT):
        return float(value)
    if kind == fd.CPPTYPE_STRING:
        return str(value)  # a StrEnum as its plain value
    if kind == fd.CPPTYPE_BOOL:
        return bool(value)
    return int(value)


def _repeated(fd: FieldDescriptor) -> bool:
    return bool(fd.is_repeated)


# -- from protobuf -------------------------------------------------------------------------


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """`get_type_hints(cls)`, once per message class: it evaluates the annotations every time
    (0.08 ms a class, two thirds of reading a request of 16 completions), and a class's hints
    never change."""
    return get_type_hints(cls)


def from_proto(msg: Message, cls: type[T], where: str = "") -> T:
    """`msg` as the wire dataclass (or TypedDict) `cls`; `where`: the dotted path of `msg` in
    its request, for the errors that name a field."""
    hints = _hints(cls)
    by_name = msg.DESCRIPTOR.fields_by_name
    if is_typeddict(cls):
        return {k: _value(msg, by_name[k], hint, None, where) for k, hint in hints.items()}  # type: ignore[return-value]
    given = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        fd = by_name.get(wire_name(f.name))
        if fd is not None:
            value = _value(msg, fd, hints[f.name], f, where)
            if value is not dataclasses.MISSING:
                given[f.name] = value
    return cls(**shape_matrices(cls, given))  # packed rows of the message's width


def _value(msg: Message, fd: FieldDescriptor, hint: Any, f: Any, where: str) -> Any:
    """The field's value, or MISSING for "absent: the dataclass default"."""
    path = f"{where}{fd.name}"
    absent = dataclasses.MISSING if f is not None and has_default(f) else None
    raw = getattr(msg, fd.name)
    inner = _inner(hint)
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        value_fd = fd.message_type.fields_by_name["value"]
        if value_fd.message_type is None:
            return dict(raw)
        return {k: _message(v, None, path) for k, v in raw.items()}
    if _repeated(fd):
        if not len(raw) and _optional(hint):
            return None  # proto3 cannot tell an empty list from an absent one
        if fd.message_type is None:
            return list(raw)
        return [_message(m, inner, f"{path}[{i}].") for i, m in enumerate(raw)]
    if fd.message_type is not None:
        return _message(raw, inner, path) if msg.HasField(fd.name) else absent
    if fd.has_presence:
        if not msg.HasField(fd.name):
            return absent
    elif not raw and f is not None and has_default(f):
        return absent  # a zero scalar without presence: the field's default
    if isinstance(inner, type) and issubclass(inner, StrEnum):
        return inner(raw)
    return raw


def _message(msg: Message, cls: Any, path: str) -> Any:
    packing = PACKING.get(msg.DESCRIPTOR.full_name)
    if packing is not None:
        return packing[1](msg, path.rstrip("."))
    return from_proto(msg, cls, path)


def _optional(hint: Any) -> bool:
    return get_origin(hint) in (Union, pytypes.UnionType) and type(None) in get_args(hint)


def _inner(hint: Any) -> Any:
    """The element or non-None type of a field's type hint."""
    if get_origin(hint) in (Union, pytypes.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else hint
    if get_origin(hint) in (Sequence, list):
        return get_args(hint)[0]
    return hint


# -- what is not a dataclass: the RPCs' messages, the method label, errors ---------------


def rpc_types(rpc: str) -> tuple[type[Message], type[Message]]:
    """The protobuf classes of an RPC's request and answer, read from the service's descriptor."""
    method = pb.DESCRIPTOR.services_by_name["Reweighter"].methods_by_name[rpc]
    return getattr(pb, method.input_type.name), getattr(pb, method.output_type.name)


def method_of(msg: Any) -> str:
    """A request's method name for the metrics label, its default applied as the engine will;
    "" for a request without one."""
    if "method" not in msg.DESCRIPTOR.fields_by_name:
        return ""
    return msg.method or str(default_of(ReweightRequest, "method"))


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


def member_error_to_proto(msg: pb.SubmitMemberRequest, exc: ReweighterError) -> pb.MemberResult:
    """A failed member on the SubmitMembers stream (the stream itself goes on)."""
    out = pb.MemberResult(group_id=msg.group_id, member_id=msg.member_id)
    out.error.type = type(exc).__name__
    out.error.code = exc.grpc_code
    out.error.message = exc.message
    if exc.field:
        out.error.field = exc.field
    return out


def member_error(msg: pb.MemberResult) -> ReweighterError | None:
    """A stream member's error, rebuilt as the server's class; None when it has none."""
    if not msg.HasField("error"):
        return None
    e = msg.error
    return error_from(e.type, e.message, e.field if e.HasField("field") else None)
