"""A field's rules (`wire(rules=...)` in reweighter.types) are one definition: every rule of
every message reaches its HTTP schema as written, and `check_rules` (the engine's, so both
transports') refuses a value that breaks it, naming the field; a keyword with no check cannot be
declared."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from reweighter import types
from reweighter.errors import InvalidInput
from reweighter.types import RULE_KEYWORDS, check_rules, wire
from reweighter.wire.http import model

MESSAGES = [types.Group, types.ReweightRequest, types.EmbedRequest, types.MemberSubmission]


def ruled() -> list[tuple[type, str, dict[str, Any]]]:
    return [
        (cls, f.name, f.metadata["rules"])
        for cls in MESSAGES
        for f in dataclasses.fields(cls)
        if f.metadata.get("rules")
    ]


def test_there_are_rules_to_hold() -> None:
    assert len(ruled()) >= 12


@pytest.mark.parametrize(("cls", "name", "rules"), ruled(), ids=lambda x: getattr(x, "__name__", x))
def test_every_rule_is_in_the_schema(cls: type, name: str, rules: dict[str, Any]) -> None:
    props = model(cls, inbound=True).model_json_schema()["properties"]
    (f,) = [f for f in dataclasses.fields(cls) if f.name == name]
    if f.metadata["in_path"]:  # in the URL path, not the body: its route states it (api)
        assert name not in props
        return
    assert rules.items() <= props[name].items(), (name, props[name])


def _breaking(keyword: str, bound: Any) -> Any:
    """A value that breaks `keyword: bound`."""
    return {
        "const": not bound,
        "minLength": "" if bound == 1 else "x" * (bound - 1),
        "maxLength": "x" * (bound + 1),
        "minimum": bound - 1,
        "exclusiveMinimum": bound,
        "minItems": [],
    }[keyword]


def _valid(cls: type) -> Any:
    return {
        types.Group: types.Group(rewards=[1.0], embeddings=[[1.0]]),
        types.ReweightRequest: types.ReweightRequest(groups=[]),
        types.EmbedRequest: types.EmbedRequest(inputs=["x"]),
        types.MemberSubmission: types.MemberSubmission(
            group_id="g", member_id="m", group_size=2, reward=1.0, embedding=[1.0]
        ),
    }[cls]


@pytest.mark.parametrize(("cls", "name", "rules"), ruled(), ids=lambda x: getattr(x, "__name__", x))
def test_check_rules_refuses_each_break(cls: type, name: str, rules: dict[str, Any]) -> None:
    check_rules(_valid(cls))  # the valid one passes
    for keyword, bound in rules.items():
        if keyword == "items":  # one item breaking the items' rules, named by its index
            (inner, inner_bound), *_ = bound.items()
            value: Any = [None, _breaking(inner, inner_bound)]
            where = f"{name}[1]"
        else:
            value, where = _breaking(keyword, bound), name
        broken = dataclasses.replace(_valid(cls), **{name: value})
        with pytest.raises(InvalidInput) as info:
            check_rules(broken, "at.")
        assert info.value.field == f"at.{where}", (keyword, info.value)


def test_a_keyword_without_a_check_cannot_be_declared() -> None:
    assert "pattern" not in RULE_KEYWORDS
    with pytest.raises(TypeError, match="pattern"):
        wire("x", None, rules={"pattern": "^a$"})
