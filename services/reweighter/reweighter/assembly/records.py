"""The records both stores hold, typed and versioned.

Two replicas sharing a Redis during a rolling upgrade may run different versions of this
module. Every record carries `v`; a reader meeting another version refuses it with a retryable
503 (`StoreUnavailable`, the class clients know) naming both versions, so the member is
retried (it may reach a replica of the other version, which can read it) and nothing is
misread. A group opened by one version therefore completes on replicas of that version; when
the old ones are gone, their records expire with their TTLs. Bump SCHEMA_VERSION on any change
to these models; a deployment that wants the versions fully apart can also change
`assembly_prefix` with the upgrade.

The in-process store keeps the objects; the Redis store keeps `dump()` strings, canonical (sorted
keys) so that equal metas are equal strings for its Lua scripts. This module is the stored data
and what an open round's data makes (its /v1/reweight request, its result): a checked member
becomes its records in machine.encode, beside the rules that read them, and a round's result a
member's answer in round.py (`answer_of`), where the round's outcomes are.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import types
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal, Self, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ..errors import StoreUnavailable
from ..types import (
    Group,
    GroupStats,
    MemberSubmission,
    ReweightRequest,
    group_list,
    member_fields,
)

SCHEMA_VERSION = 4
"""2: a round's statistics are one `stats` object (GroupStats), not five flat fields; a member
carries `step`, `prompt_key` and `advantage_params` (both landed together, one version).
3: a member's `digests` cover every payload field (its answer too), one digest per field.
4: a member may carry `quality`, and a round's meta says whether its members give it."""

SHARED = member_fields("shared")
"""The member fields every member of a round agrees on (types.MemberRole): GroupMeta's fields."""
PAYLOAD = member_fields("payload")
"""The member fields that are its own values: its reward, and what `digests` covers. Each is one
item of the Group list `group_list` names (reward -> rewards, quality -> quality)."""


_GIVEN: dict[frozenset[str], set[str]] = {}
"""One `__pydantic_fields_set__` per distinct set of given fields, shared by the records that
have it (see `_Record.model_post_init`)."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int = SCHEMA_VERSION

    def model_post_init(self, context: Any, /) -> None:
        """Share the set of fields given (pydantic keeps one per instance: 730 B of a short
        round's 1.5 KB result kept `assembly_result_ttl_s`, 220 B of a waiting member's record;
        issue 51). Records are frozen, so nothing changes it in place; `model_copy` copies it
        before an update. dump() writes every field, whichever were given."""
        given = self.__pydantic_fields_set__
        shared = _GIVEN.setdefault(frozenset(given), given)
        if shared is not given:
            object.__setattr__(self, "__pydantic_fields_set__", shared)

    def dump(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @classmethod
    def load(cls, raw: str | bytes) -> Self:
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise StoreUnavailable(f"unreadable {cls.__name__} in the assembly store") from e
        version = data.get("v") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise StoreUnavailable(
                f"the assembly store holds a {cls.__name__} of schema version {version!r}; "
                f"this replica reads version {SCHEMA_VERSION} (a rolling upgrade?): retry, or "
                "give each version its own assembly_prefix"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise StoreUnavailable(f"malformed {cls.__name__} in the assembly store") from e


_GROUP_META_DOC = """What every member of a round must agree on: the member's SHARED fields
in their stored form (params and advantage_params after validation, defaults filled in, so `{}`
and the explicit defaults are equal; names as strings), the kind (`input`) and width (`dim`,
None for completions) of its input, and whether its members give `quality` (all or none: a
group reweights its quality apart from the rest, or its whole rewards). Derived from
MemberSubmission (`_group_meta`); any change to it is a new SCHEMA_VERSION
(tests/assembly/test_contract.py holds the two together)."""


def _stored_field(f: dataclasses.Field[Any], hint: Any) -> tuple[Any, Any]:
    """A SHARED member field's (type, default) as GroupMeta stores it, the types of the values
    machine.encode stores: a mapping (parsed params) as a JSON object, a name (a StrEnum) as
    its string; required unless the wire gives None or an empty mapping by default."""
    if get_origin(hint) in (Mapping, dict):
        kind: Any = dict[str, Any]
    elif isinstance(hint, types.UnionType):
        args = tuple(dict.fromkeys(
            str if isinstance(a, type) and issubclass(a, StrEnum) else a for a in get_args(hint)
        ))  # fmt: skip
        kind = functools.reduce(operator.or_, args)
    else:
        kind = hint
    if f.default_factory is not dataclasses.MISSING:
        return kind, Field(default_factory=dict)
    return kind, (None if f.default is None else ...)


def _group_meta() -> type[_Record]:
    """GroupMeta, derived from MemberSubmission's SHARED fields (types.MemberRole): a field
    given that role is stored, compared and rebuilt with no code here."""
    hints = get_type_hints(MemberSubmission)
    shared = {f.name: _stored_field(f, hints[f.name]) for f in dataclasses.fields(MemberSubmission)
              if f.name in SHARED}  # fmt: skip
    return create_model(
        "GroupMeta",
        __base__=_Record,
        __module__=__name__,
        __doc__=_GROUP_META_DOC,
        **shared,
        input=(Literal["completion", "embedding"], ...),
        dim=(int | None, ...),
        quality=(bool, False),
    )


GroupMeta = _group_meta()


class MemberRecord(_Record):
    reward: float
    digests: dict[str, str]
    """sha256 per PAYLOAD field the member gave, other than `reward` (kept as is): the completion
    (UTF-8) or the float32 embedding, the answer. A retry is compared by them; a resend that
    differs is a 409 naming the first field that does (round.conflict)."""
    value: str | list[float]
    """The completion or the embedding."""
    answer: str | None = None
    """The member's extracted final answer (MemberSubmission.answer), if it gave one."""
    quality: float | None = None
    """The quality part of its reward (MemberSubmission.quality), if it gave one (then every
    member of its round did: GroupMeta.quality)."""


class RoundResult(_Record):
    """A round's answer for all its members: reweighted when complete, raw when it closed short
    at a deadline (then `ids` are the members present)."""

    round: int
    meta: GroupMeta
    complete: bool
    ids: list[str]
    """In member_id string order; every list below follows it."""
    raw: list[float]
    digests: list[dict[str, str]]
    rewards: list[float]
    advantages: list[float] | None
    stats: GroupStats | None
    """The group's statistics (complete), None when it closed short: the wire's own GroupStats,
    so a field added to it is stored and answered with no code here."""


class OpenRound(BaseModel):
    """An open round as `AssemblyStore.members` reads it (not stored as such)."""

    model_config = ConfigDict(frozen=True)

    round: int
    meta: GroupMeta
    members: dict[str, MemberRecord]

    def ordered(self) -> tuple[list[str], list[MemberRecord]]:
        """Member ids in string order (the order its group is reweighted in), their records."""
        ids = sorted(self.members)
        return ids, [self.members[i] for i in ids]

    def request(self, group_id: str) -> ReweightRequest:
        """The /v1/reweight request of this round (whole), derived from the member fields' roles
        (types.MemberRole): each SHARED field goes where the request has it (group_size is the
        group's length), each PAYLOAD field becomes its Group list (`group_list`: reward ->
        rewards, quality -> quality)."""
        _, records = self.ordered()
        meta = self.meta
        lists: dict[str, Any] = {"rewards": [r.reward for r in records]}
        lists["completions" if meta.input == "completion" else "embeddings"] = [
            r.value for r in records
        ]
        # Members' answers, when any member gave one (darling's classes, distinct_answers), and
        # always with a prompt_key (outcome_ucb: a null answer gets no bonus).
        answers = [r.answer for r in records]
        if meta.prompt_key or any(a is not None for a in answers):
            lists["answers"] = answers
        if meta.quality:  # every member gave one (the meta is the round's: all or none)
            lists["quality"] = [r.quality for r in records]
        assert set(lists) <= {group_list(name) for name in PAYLOAD}
        shared = {name: getattr(meta, name) for name in SHARED if name != "group_size"}
        in_group = {k: v for k, v in shared.items() if k in _GROUP_FIELDS}
        one = Group(id=group_id, **lists, **in_group)
        rest = {k: v for k, v in shared.items() if k not in _GROUP_FIELDS}
        return ReweightRequest([one], **rest)

    def result(
        self,
        rewards: list[float] | None,
        advantages: list[float] | None,
        stats: GroupStats | None,
    ) -> RoundResult:
        """The round's answer over its members now: reweighted `rewards` with the group's
        `stats` (complete), or None: closed short, the raw rewards."""
        ids, records = self.ordered()
        raw = [r.reward for r in records]
        return RoundResult(
            round=self.round,
            meta=self.meta,
            complete=rewards is not None,
            ids=ids,
            raw=raw,
            digests=[r.digests for r in records],
            rewards=raw if rewards is None else rewards,
            advantages=advantages,
            stats=stats,
        )


_GROUP_FIELDS = frozenset(f.name for f in dataclasses.fields(Group))
"""The request fields a Group carries (the rest are the request's)."""

__all__ = [
    "PAYLOAD",
    "SCHEMA_VERSION",
    "SHARED",
    "GroupMeta",
    "MemberRecord",
    "OpenRound",
    "RoundResult",
]
