"""The rules every form of a wire message shares, written once."""

from __future__ import annotations

from dataclasses import MISSING, Field, fields
from typing import Any

import numpy as np


def wire_name(name: str) -> str:
    """A field's name on the wire: its Python name without the trailing underscore that keeps
    it off a keyword (`lambda_` is `lambda` in JSON and in the proto)."""
    return name[:-1] if name.endswith("_") else name


def default_of(cls: type, name: str) -> Any:
    """The default of a message's field: the one place a transport finds it (a proto3 string
    left empty, an HTTP field left out)."""
    (f,) = [f for f in fields(cls) if f.name == name]
    return _default(f)


def _default(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def rules_of(cls: type, name: str) -> dict[str, Any]:
    """The `wire(rules=...)` of a message's field: JSON Schema keywords, for a schema that
    states the field apart from its message's model (a path parameter)."""
    (f,) = [f for f in fields(cls) if f.name == name]
    return dict(f.metadata.get("rules") or {})


def has_default(f: Field) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def shape_matrices(cls: type, given: dict[str, Any]) -> dict[str, Any]:
    """`given` (a message's field values) with each matrix field (`wire(matrix=width_field)`)
    as a float32 [rows, width] array: what HTTP carries as rows and gRPC as one packed array
    become the same value, the width read from the message's own field (0 or absent: 1)."""
    for f in fields(cls):  # type: ignore[arg-type]
        width = f.metadata.get("matrix")
        if width and given.get(f.name) is not None:
            rows = np.asarray(given[f.name], dtype=np.float32)
            given[f.name] = rows.reshape(-1, int(given.get(width) or 1))
    return given
