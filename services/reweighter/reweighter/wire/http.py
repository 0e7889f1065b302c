"""The HTTP contract as pydantic models, derived from the messages of reweighter.types: what
/openapi.json documents, FastAPI parses and emits, and the HTTP clients parse answers with.

`model(Message, inbound)` builds a message's model from its dataclass fields: requests (inbound)
check the wire format only (strict types, no unknown keys, non-empty lists where documented);
every rule about meaning (lengths, limits, method names, parameters) lives in the engine, so
HTTP and gRPC reject the same requests with the same messages. What a schema can say of those
rules it says: a field's `wire(rules=...)` (const, minLength, minimum, ...) and a message's
`one_of` (exactly one of two fields given) are written into the request's JSON schema here,
and judged by the engine (`reweighter.types.check_rules`), never by pydantic. The method and
advantage names are published as enums so generated clients see the choices. `to_engine`,
`answer` and `body` are the three conversions, for every message.
"""

from __future__ import annotations

import dataclasses
import types as pytypes
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin, get_type_hints

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    create_model,
)

from ..errors import ReweighterError, error_from
from ..methods.catalog import CATALOG, method_names
from ..methods.estimators import ESTIMATORS
from ..types import (
    AdvantageKind,
    EmbedRequest,
    EmbedResult,
    MemberResult,
    MemberSubmission,
    Method,
    ReweightRequest,
    ReweightResult,
)
from .common import shape_matrices, wire_name

Number = StrictFloat | StrictInt
"""A JSON number; strict so that "1" or true is rejected instead of silently converted.
NaN and infinity pass through to the engine, which rejects them with the same message on both
transports (JSON has no NaN, but Python clients can send it)."""


class _MethodSchema:
    """The method names as an enum, read from the catalogue when the schema is generated (so a
    method added to the catalogue is documented without touching this file)."""

    def __get_pydantic_json_schema__(self, core: Any, handler: GetJsonSchemaHandler) -> Any:
        doc = "reweighting method (see GET /v1/info)"
        return {"type": "string", "enum": method_names(), "description": doc}


def _whole(value: Any) -> Any:
    """A float with no fraction (8.0) as the integer it is: JSON Schema's `integer` is any
    number without a fraction, so a schema-valid 8.0 is taken; 8.5 is still refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WholeInt = Annotated[StrictInt, BeforeValidator(_whole)]
"""A JSON integer, as JSON Schema reads one: strict (no "8", no true), 8.0 taken as 8."""

MethodName = Annotated[StrictStr, _MethodSchema()]
AdvantageName = Annotated[
    StrictStr, WithJsonSchema({"type": "string", "enum": [m.value for m in AdvantageKind]})
]


def _method_params(schema: dict[str, Any]) -> None:
    """`params` as one of the methods' parameter schemas (the models the engine validates)."""
    schema["anyOf"] = [
        {"title": str(name), **spec.params_model.model_json_schema(by_alias=True)}
        for name, spec in CATALOG.items()
    ]


def _advantage_params(schema: dict[str, Any]) -> None:
    """`advantage_params` as one of the estimators' parameter schemas."""
    schema["anyOf"] = [
        {**spec.params_model.model_json_schema(by_alias=True), "title": str(name)}
        for name, spec in ESTIMATORS.items()
    ]


SCHEMAS: dict[str, Callable[[dict[str, Any]], None]] = {
    "method_params": _method_params,
    "advantage_params": _advantage_params,
}
"""The JSON schemas a field names with `wire(schema=...)`."""
_NON_EMPTY: dict[str, Any] = {"minItems": 1}  # documented; the engine still judges
_IN = ConfigDict(extra="forbid", alias_generator=wire_name, populate_by_name=True)
_OUT = ConfigDict(alias_generator=wire_name, populate_by_name=True)
_SOURCE: dict[type[BaseModel], type] = {}
"""Each derived model's message dataclass."""
_MODELS: dict[tuple[type, bool], type[BaseModel]] = {}


def model(cls: type, inbound: bool) -> type[BaseModel]:
    """The HTTP model of message `cls`, a request's (`inbound`) or an answer's, built once.
    Named by the rule Request/Submission -> In, Result -> Out (ReweightRequest: ReweightIn);
    fields carried in the URL path are left out of a request's body."""
    if (cls, inbound) in _MODELS:
        return _MODELS[(cls, inbound)]
    hints = get_type_hints(cls)
    spec: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if inbound and meta.get("in_path"):
            continue
        kw: dict[str, Any] = {"description": meta.get("doc")}
        extra = _field_schema(meta.get("schema"), meta.get("rules") if inbound else None)
        if extra is not None:
            kw["json_schema_extra"] = extra
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default.value if isinstance(f.default, StrEnum) else f.default
        elif f.default_factory is not dataclasses.MISSING:
            kw["default_factory"] = f.default_factory
        if not inbound and meta.get("omit_none"):
            kw.update(default=None, exclude_if=_is_none)
        hint = list[list[float]] if meta.get("matrix") else hints[f.name]
        spec[f.name] = (_type(hint, inbound, meta.get("non_empty", False)), Field(**kw))
    base = cls.__name__.removesuffix("Request").removesuffix("Submission").removesuffix("Result")
    doc = cls.__doc__ if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}(") else None
    name, config = (base + "In", _IN) if inbound else (base + "Out", _OUT)
    one_of = getattr(cls, "one_of", None)
    if inbound and one_of:
        config = ConfigDict(**config, json_schema_extra=_one_of(one_of))  # type: ignore[typeddict-item]
    built = create_model(name, __config__=config, __doc__=doc, **spec)  # type: ignore[call-overload]
    _MODELS[(cls, inbound)] = built
    _SOURCE[built] = cls
    return built


def _field_schema(
    named: str | None, rules: Mapping[str, Any] | None
) -> Callable[[dict[str, Any]], None] | None:
    """A field's additions to its JSON schema: the schema `wire(schema=...)` names, and its
    `rules` as they are (JSON Schema keywords; on an optional field they sit beside its
    anyOf, where they constrain only a value of their own type)."""
    if not named and not rules:
        return None

    def edit(schema: dict[str, Any]) -> None:
        if named:
            SCHEMAS[named](schema)
        if rules:
            schema.update(rules)

    return edit


def _one_of(names: Sequence[str]) -> Callable[[dict[str, Any]], None]:
    """A message's `one_of` as its schema's oneOf: exactly one of the fields given, as a value
    of its own type (a null is not given)."""

    def edit(schema: dict[str, Any]) -> None:
        props = schema.get("properties", {})
        schema["oneOf"] = [
            {"required": [name], "properties": {name: _not_null(props[name])}} for name in names
        ]

    return edit


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    """A property's schema without its null branch: what a given field must be."""
    branches = [b for b in prop.get("anyOf", ()) if b.get("type") != "null"]
    return branches[0] if len(branches) == 1 else {"anyOf": branches} if branches else prop


def _is_none(value: Any) -> bool:
    return value is None


def _type(hint: Any, inbound: bool, non_empty: bool = False) -> Any:
    """The pydantic type of a field typed `hint` in a message dataclass."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, pytypes.UnionType):
        rest = [a for a in args if a is not type(None)]
        if set(rest) == {Method, str}:
            t = MethodName if inbound else str
        elif set(rest) == {AdvantageKind, str}:
            t = AdvantageName if inbound else str
        else:  # one type, or a choice (a text or a list of texts)
            (t, *more) = [_type(a, inbound, non_empty) for a in rest]
            for m in more:
                t = t | m
        return t | None if len(rest) < len(args) else t
    if origin in (Sequence, list):
        listed = list[_type(args[0], inbound)]  # type: ignore[misc]
        return Annotated[listed, Field(json_schema_extra=_NON_EMPTY)] if non_empty else listed
    if origin in (Mapping, dict):
        return dict[str, Any]
    if dataclasses.is_dataclass(hint):
        return model(hint, inbound)  # type: ignore[arg-type]
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return hint
    plain = {float: (Number, float), int: (WholeInt, int), str: (StrictStr, str)}
    plain[bool] = (StrictBool, bool)
    if hint in plain:
        return plain[hint][0 if inbound else 1]
    raise TypeError(f"no HTTP type for a message field typed {hint!r}")


# -- the conversions, for every message ---------------------------------------------------

M = TypeVar("M")


def to_engine(value: BaseModel, **path: Any) -> Any:
    """A parsed body (or a parsed answer) as its message dataclass; `path`: the fields the URL
    carries. A matrix field becomes a float32 [rows, width] array."""
    cls = _SOURCE[type(value)]
    given = {name: _engine(getattr(value, name)) for name in type(value).model_fields}
    return cls(**shape_matrices(cls, given), **path)


def _engine(v: Any) -> Any:
    if isinstance(v, BaseModel):
        return to_engine(v)
    if isinstance(v, list) and v and isinstance(v[0], BaseModel):
        return [to_engine(x) for x in v]
    return v


def answer(result: Any) -> BaseModel:
    """An engine result as its answer model (what the route returns)."""
    out = model(type(result), inbound=False)
    matrices = [f.name for f in dataclasses.fields(result) if f.metadata.get("matrix")]
    if matrices:  # an array as its rows (pydantic reads lists, not arrays)
        given = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        for name in matrices:
            given[name] = np.asarray(given[name], dtype=np.float32).tolist()
        return out.model_validate(given, from_attributes=True)
    return out.model_validate(result, from_attributes=True)


def parse(cls: type[M], data: bytes) -> M:
    """A client's view of an answer: the JSON parsed with the server's own model, as `cls`."""
    return to_engine(model(cls, inbound=False).model_validate_json(data))  # type: ignore[no-any-return]


def body(message: Any) -> dict[str, Any]:
    """The JSON body a client sends for `message`, built without validation (sent as it is, NaN
    included, so the server judges it and names the field); None fields and the fields carried
    in the URL path are left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if value is not None and not f.metadata.get("in_path"):
            out[wire_name(f.name)] = _json(value)
    return out


def _json(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return body(v)
    if isinstance(v, str):
        return str(v)  # a StrEnum as its plain value
    if isinstance(v, Mapping):
        return dict(v)
    if hasattr(v, "tolist"):  # numpy or torch: arrays and scalars
        return v.tolist()
    if isinstance(v, Sequence):
        return [_json(x) for x in v]
    return v


ReweightIn = model(ReweightRequest, inbound=True)
ReweightOut = model(ReweightResult, inbound=False)
MemberIn = model(MemberSubmission, inbound=True)
MemberOut = model(MemberResult, inbound=False)
EmbedIn = model(EmbedRequest, inbound=True)
EmbedOut = model(EmbedResult, inbound=False)


# -- status and errors: HTTP-only shapes (TEI's conventions) -------------------------------


class StatusOut(BaseModel):
    status: str


class ErrorBody(BaseModel):
    message: str
    field: str | None = Field(None, description="the offending input as a dotted path")
    type: str = Field(..., description="InvalidInput, LimitExceeded, Overloaded, NotReady, ...")


class ErrorOut(BaseModel):
    error: ErrorBody

    @classmethod
    def from_error(cls, exc: ReweighterError) -> ErrorOut:
        return cls(error=ErrorBody(message=exc.message, field=exc.field, type=type(exc).__name__))

    def to_error(self, retry_after: float | None = None) -> ReweighterError:
        e = self.error
        return error_from(e.type, e.message, e.field, retry_after=retry_after)
