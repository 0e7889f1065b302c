"""Group assembly's state machine, written once: the rules of `add`, in the order they apply.

Why one module: the in-process store and the Redis store hold the same state and must take the
same transitions. `MemoryStore` runs `decide` on its dicts; `RedisStore` runs a Lua script (the
only way to make the read-and-write atomic across replicas) that walks `RULES` in the same
order and answers with the rule's name, which `outcome` turns into the same typed outcome. The
contract suite (tests/assembly/test_contract.py) builds, for every rule here, the state that
triggers it in *both* stores and checks each answers that rule: a rule added here without its
Lua twin fails there.

An outcome is one of six small frozen types (`AddOutcome`); the assembler matches on them in
one place. Other transitions (`finish`, `claim`, expiry) have one effect each and are described
on `AssemblyStore`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..limits import AssemblyLimits
from .records import GroupMeta, MemberRecord, RoundResult


@dataclass(frozen=True)
class Added:
    """The member joined the open round `round` (opened by it when `count` is 1)."""

    round: int
    count: int


@dataclass(frozen=True)
class Exists:
    """The member is already in the open round (a retry while it is open): `record` as stored."""

    round: int
    count: int
    record: MemberRecord


@dataclass(frozen=True)
class Answered:
    """A round the caller has not seen was answered: the member's own (a retry, or the same id
    with another payload) or the group's latest; `result` is that round's answer."""

    round: int
    result: RoundResult


@dataclass(frozen=True)
class Mismatch:
    """The open round was opened with other settings (`meta`): the member does not fit it."""

    round: int
    count: int
    meta: GroupMeta


@dataclass(frozen=True)
class Full:
    """The open round already holds its group_size members, and this one is not among them."""

    round: int
    count: int


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
    rnd = v.open_round if v.open_round is not None else (
        v.latest.round + 1 if v.latest is not None else 0
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


__all__ = [
    "RULES",
    "AddOutcome",
    "Added",
    "Answered",
    "Arrival",
    "Bounded",
    "Exists",
    "Full",
    "Mismatch",
    "Rule",
    "View",
    "decide",
    "outcome",
]
