"""Group assembly's state machine, written once: the rules of `add`, in the order they apply.

Why one module: the in-process store and the Redis store hold the same state and must take the
same transitions. `MemoryStore` runs `decide` on its dicts; `RedisStore` runs a Lua script (the
only way to make the read-and-write atomic across replicas) that walks `RULES` in the same
order and answers with the rule's name, which `outcome` turns into the same typed outcome. The
contract suite (tests/assembly/test_contract.py) builds, for every rule here, the state that
triggers it in *both* stores and checks each answers that rule: a rule added here without its
Lua twin fails there.

An outcome is one of six small frozen types (`AddOutcome`); a member's round matches on them in
one place (round.py, `join`). Other transitions (`finish`, `claim`, expiry) have one effect each
and are described on `AssemblyStore`.

The member as the rules read it is here too: `encode` turns a checked member into its records
(`Member`: its round's meta from its SHARED fields, compared whole by `other_settings`, its
record with a digest of each PAYLOAD field, kept by `joins` and found by `present`). What a
member is answered from the outcome (its answer off its round's result, the 409 naming the
field that does not fit) is its round's business: round.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from ..limits import AssemblyLimits
from ..tenancy import DEFAULT_TENANT, current_tenant, scoped
from .records import PAYLOAD, SHARED, GroupMeta, MemberRecord, RoundResult

if TYPE_CHECKING:  # the stores need no engine
    from ..engine.checks import CheckedMember


@dataclass(frozen=True)
class _InRound:
    round: int
    """The open round the outcome is about."""
    count: int
    """Its members, this one included when it was added."""


@dataclass(frozen=True)
class Added(_InRound):
    """The member joined the open round (opened by it when `count` is 1)."""


@dataclass(frozen=True)
class Exists(_InRound):
    """The member is already in the open round (a retry while it is open): `record` as stored."""

    record: MemberRecord


@dataclass(frozen=True)
class Mismatch(_InRound):
    """The open round was opened with other settings (`meta`): the member does not fit it."""

    meta: GroupMeta


@dataclass(frozen=True)
class Full(_InRound):
    """The open round already holds its group_size members, and this one is not among them."""


@dataclass(frozen=True)
class Answered:
    """A round the caller has not seen was answered: the member's own (a retry, or the same id
    with another payload) or the group's latest; `result` is that round's answer."""

    round: int
    result: RoundResult


@dataclass(frozen=True)
class Bounded:
    """A store bound is reached: `bound` is "groups" or "members"."""

    bound: Literal["groups", "members"]


AddOutcome = Added | Exists | Answered | Mismatch | Full | Bounded


@dataclass(frozen=True)
class Rule:
    """One transition of `add`: its name (what the Lua script answers), its outcome, and when
    it applies (the first rule whose condition holds wins)."""

    name: str
    outcome: type[AddOutcome]  # type: ignore[valid-type]
    when: str


RULES: tuple[Rule, ...] = (
    Rule("own_answer", Answered, "after_round < 0 and the member id is in a kept answered round "
         "(its latest)"),
    Rule("newer_answer", Answered, "the group's latest kept answered round is after after_round"),
    Rule("other_settings", Mismatch, "an open round exists and its meta differs"),
    Rule("present", Exists, "the member is in the open round (its expiry is extended)"),
    Rule("whole", Full, "the open round holds group_size members"),
    Rule("groups_bound", Bounded, "no open round, and the store holds max_open_groups rounds"),
    Rule("members_bound", Bounded, "the store holds max_held_members members"),
    Rule("joins", Added, "otherwise: the member joins the open round, which is opened as the "
         "latest answered round + 1 when there is none (its expiry is extended)"),
)  # fmt: skip
BY_NAME = {r.name: r for r in RULES}


@dataclass(frozen=True)
class Arrival:
    """One call of `add`, as the rules read it."""

    group_id: str
    member_id: str
    meta: GroupMeta
    record: MemberRecord
    group_size: int
    ttl_s: float
    after_round: int


@dataclass(frozen=True)
class View:
    """What the rules read of a store for one arrival."""

    own: RoundResult | None
    """The kept answered round this member id was last in (None when after_round >= 0)."""
    latest: RoundResult | None
    """The group's latest kept answered round."""
    open_round: int | None
    open_meta: GroupMeta | None
    open_count: int
    open_record: MemberRecord | None
    """This member's record in the open round."""
    groups: int
    held: int


def decide(v: View, a: Arrival, limits: AssemblyLimits) -> tuple[Rule, AddOutcome]:
    """The first rule of RULES that holds, and its outcome (the store then applies its effect:
    extend on `present`, add on `joins`)."""
    if v.own is not None:
        return BY_NAME["own_answer"], Answered(v.own.round, v.own)
    if v.latest is not None and v.latest.round > a.after_round:
        return BY_NAME["newer_answer"], Answered(v.latest.round, v.latest)
    if v.open_round is not None:
        assert v.open_meta is not None
        if v.open_meta != a.meta:
            return BY_NAME["other_settings"], Mismatch(v.open_round, v.open_count, v.open_meta)
        if v.open_record is not None:
            return BY_NAME["present"], Exists(v.open_round, v.open_count, v.open_record)
        if v.open_count >= a.group_size:
            return BY_NAME["whole"], Full(v.open_round, v.open_count)
    elif v.groups >= limits.max_open_groups:
        return BY_NAME["groups_bound"], Bounded("groups")
    if v.held >= limits.max_held_members:
        return BY_NAME["members_bound"], Bounded("members")
    rnd = (
        v.open_round
        if v.open_round is not None
        else (v.latest.round + 1 if v.latest is not None else 0)
    )
    return BY_NAME["joins"], Added(rnd, v.open_count + 1)


def outcome(name: str, rnd: int, count: int, value: str) -> tuple[Rule, AddOutcome]:
    """A rule's answer as the Lua script gives it (its name, round, count and one stored
    value: a result, a record, a meta or a bound), typed."""
    rule = BY_NAME[name]
    kind = rule.outcome
    if kind is Answered:
        return rule, Answered(rnd, RoundResult.load(value))
    if kind is Exists:
        return rule, Exists(rnd, count, MemberRecord.load(value))
    if kind is Mismatch:
        return rule, Mismatch(rnd, count, GroupMeta.load(value))
    if kind is Full:
        return rule, Full(rnd, count)
    if kind is Bounded:
        assert value in ("groups", "members")
        return rule, Bounded(value)  # type: ignore[arg-type]
    return rule, Added(rnd, count)


# -- the member as the rules read it ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Member:
    """A checked member and its records as the stores keep them: what its wait needs and no
    more (issue 51: the parsed request, its params models and its array are not held while it
    waits; its text or vector is held once, in `record`)."""

    gid: str
    """The group id as its sender named it (in messages and answers)."""
    mid: str
    group_size: int
    timeout_s: float
    """Its wait: the member's own, or the default, capped (CheckedMember.timeout_s)."""
    meta: GroupMeta
    """Its round's meta: what every member must share (one object for equal metas: `_meta`)."""
    record: MemberRecord
    """Compared by digest on a retry; its reward is the member's raw reward."""
    tenant: str = DEFAULT_TENANT
    """Whose member it is: its group lives in that tenant's namespace of the store."""

    @property
    def key(self) -> str:
        """The group's key in the store: the id in its tenant's namespace, so two tenants
        using one group id never meet (reweighter.tenancy.scoped)."""
        return scoped(self.gid, self.tenant)

    @property
    def reward(self) -> float:
        return self.record.reward


def _stored(value: Any) -> Any:
    """A checked shared field as GroupMeta stores it: parsed params as their JSON (defaults
    filled in, aliases as on the wire), names as their strings."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, StrEnum):
        return value.value
    return value


def _digest(value: str | bytes) -> str:
    return hashlib.sha256(value.encode("utf-8") if isinstance(value, str) else value).hexdigest()


def encode(c: CheckedMember, tenant: str | None = None) -> Member:
    """A checked member with its records: the meta from its SHARED fields, the record from its
    PAYLOAD (each given field digested, so none can change unseen: `conflict` compares them),
    in `tenant`'s namespace (default: the caller's)."""
    payload: dict[str, Any] = {name: getattr(c, name) for name in PAYLOAD}
    digests: dict[str, str] = {}
    for name, given in payload.items():
        if name == "reward" or given is None:
            continue
        digests[name] = _digest(given.tobytes() if hasattr(given, "tobytes") else str(given))
    if c.completion is not None:
        value: str | list[float] = c.completion
        kind: Literal["completion", "embedding"] = "completion"
        dim = None
    else:
        assert c.embedding is not None
        value, kind, dim = c.embedding.tolist(), "embedding", int(c.embedding.shape[0])
    meta = _meta({name: _stored(getattr(c, name)) for name in SHARED}, kind, dim, c.quality)
    record = MemberRecord(
        reward=c.reward, digests=digests, value=value, answer=c.answer, quality=c.quality
    )
    owner = current_tenant() if tenant is None else tenant
    return Member(c.group_id, c.member_id, c.group_size, c.timeout_s, meta, record, owner)


_METAS: dict[str, GroupMeta] = {}
_METAS_MAX = 4096
"""Metas built lately, by their canonical JSON: members of one job share their settings, so
the waiting members, open rounds and kept results of thousands of groups hold one GroupMeta
(about 1.4 KB each) instead of one each (issue 51). Frozen models, compared by value: sharing
one changes no answer. Bounded; emptied when full (a job's few metas come back at once)."""


def _meta(
    shared: dict[str, Any],
    kind: Literal["completion", "embedding"],
    dim: int | None,
    quality: float | None,
) -> GroupMeta:
    given = quality is not None  # the round's members give quality: all or none (round.conflict)
    key = json.dumps(
        [shared, kind, dim, given], sort_keys=True, separators=(",", ":"), default=repr
    )
    meta = _METAS.get(key)
    if meta is None:
        if len(_METAS) >= _METAS_MAX:
            _METAS.clear()
        meta = _METAS[key] = GroupMeta(**shared, input=kind, dim=dim, quality=given)
    return meta


__all__ = [
    "RULES",
    "AddOutcome",
    "Added",
    "Answered",
    "Arrival",
    "Bounded",
    "Exists",
    "Full",
    "Member",
    "Mismatch",
    "Rule",
    "View",
    "decide",
    "outcome",
    "encode",
]
