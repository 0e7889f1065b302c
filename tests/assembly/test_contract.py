"""The assembly contract, run on both stores in one run (`store_kind`: memory and Redis): every
rule of machine.RULES, results, claims and expiry at the store; order, idempotency, conflicts
(before and after the round was answered), rounds, deadlines, bounds and validation through the
assembler, against the real engine."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest
import torch

from reweighter.assembly import GroupAssembler, MemberSubmission, make_store
from reweighter.assembly.machine import (
    RULES,
    Added,
    AddOutcome,
    Answered,
    Bounded,
    Exists,
    Full,
    Mismatch,
)
from reweighter.assembly.records import (
    PAYLOAD,
    SCHEMA_VERSION,
    SHARED,
    GroupMeta,
    MemberRecord,
    RoundResult,
)
from reweighter.assembly.store import AssemblyStore
from reweighter.engine import ReweightEngine
from reweighter.errors import (
    Conflict,
    InvalidInput,
    LimitExceeded,
    Overloaded,
    PreconditionFailed,
    StoreUnavailable,
)
from reweighter.methods import advantages
from reweighter.types import Group, GroupStats, ReweightRequest, group_list

from .conftest import Build, Later, embedded_group, ordered_request, settings, waiting

# -- the store: every rule of the state machine, both stores -----------------------------------

META = GroupMeta(group_size=2, method="dra", params={}, advantages="none", input="embedding",
                 dim=2)  # fmt: skip
REC = MemberRecord(reward=1.0, digests={"embedding": "d"}, value=[1.0, 0.0])


def _result(rnd: int, meta: GroupMeta, ids: list[str]) -> RoundResult:
    n = len(ids)
    return RoundResult(
        round=rnd, meta=meta, complete=True, ids=ids, raw=[1.0] * n,
        digests=[{"embedding": "d"}] * n, rewards=[1.0] * n, advantages=None,
        stats=GroupStats(1.0),
    )  # fmt: skip


async def _answered_rounds(store: AssemblyStore) -> tuple[RoundResult, RoundResult]:
    """Group g: round 0 answered with member a, round 1 with member b."""
    assert await store.add("g", "a", META, REC, 1, 5.0) == Added(0, 1)
    r0 = _result(0, META, ["a"])
    assert await store.finish("g", r0) == r0
    assert await store.add("g", "b", META, REC, 1, 5.0, after_round=0) == Added(1, 1)
    r1 = _result(1, META, ["b"])
    assert await store.finish("g", r1) == r1
    return r0, r1


async def _own_answer(store: AssemblyStore) -> tuple[AddOutcome, AddOutcome]:
    r0, _ = await _answered_rounds(store)  # a's own round (0), not the latest (1)
    return await store.add("g", "a", META, REC, 1, 5.0), Answered(0, r0)


async def _newer_answer(store: AssemblyStore) -> tuple[AddOutcome, AddOutcome]:
    _, r1 = await _answered_rounds(store)  # a round after the one the caller has seen
    return await store.add("g", "a", META, REC, 1, 5.0, after_round=0), Answered(1, r1)


async def _other_settings(store: AssemblyStore) -> tuple[AddOutcome, AddOutcome]:
    await store.add("g", "a", META, REC, 2, 5.0)
    other = META.model_copy(update={"method": "mmr"})
    return await store.add("g", "b", other, REC, 2, 5.0), Mismatch(0, 1, META)


async def _present(store: AssemblyStore) -> tuple[AddOutcome, AddOutcome]:
    await store.add("g", "a", META, REC, 2, 5.0)
    return await store.add("g", "a", META, REC, 2, 5.0), Exists(0, 1, REC)


async def _whole(store: AssemblyStore) -> tuple[AddOutcome, AddOutcome]:
    await store.add("g", "a", META, REC, 2, 5.0)
    await store.add("g", "b", META, REC, 2, 5.0)
    return await store.add("g", "c", META, REC, 2, 5.0), Full(0, 2)


async def _groups_bound(store: AssemblyStore) -> tuple[AddOutcome, AddOutcome]:
    for g in ("g1", "g2"):  # max_open_groups = 2
        await store.add(g, "a", META, REC, 2, 5.0)
    return await store.add("g3", "a", META, REC, 2, 5.0), Bounded("groups")


async def _members_bound(store: AssemblyStore) -> tuple[AddOutcome, AddOutcome]:
    meta3 = META.model_copy(update={"group_size": 3})
    for g, m in (("g1", "a"), ("g1", "b"), ("g2", "a")):  # max_held_members = 3
        await store.add(g, m, meta3, REC, 3, 5.0)
    return await store.add("g2", "b", meta3, REC, 3, 5.0), Bounded("members")


async def _joins(store: AssemblyStore) -> tuple[AddOutcome, AddOutcome]:
    await _answered_rounds(store)  # a new member after round 1: it opens round 2
    return await store.add("g", "c", META, REC, 2, 5.0, after_round=1), Added(2, 1)


SCENARIOS = {
    "own_answer": _own_answer,
    "newer_answer": _newer_answer,
    "other_settings": _other_settings,
    "present": _present,
    "whole": _whole,
    "groups_bound": _groups_bound,
    "members_bound": _members_bound,
    "joins": _joins,
}


def test_every_rule_has_a_scenario_and_a_lua_branch() -> None:
    """A rule added to machine.RULES without its scenario here, or without its branch in the
    Redis script, fails: the two stores cannot drift apart silently."""
    from reweighter.assembly.redis_store import _ADD

    assert [r.name for r in RULES] == list(SCENARIOS)
    positions = [_ADD.index(f"'{r.name}'") for r in RULES]
    assert positions == sorted(positions), "the script must try the rules in RULES' order"


@pytest.mark.parametrize("rule", [r.name for r in RULES])
async def test_each_rule_of_the_state_machine(build: Build, rule: str) -> None:
    store = build(assembly_max_open_groups=2, assembly_max_held_members=3).store
    got, want = await SCENARIOS[rule](store)
    assert got == want
    assert type(got) is next(r.outcome for r in RULES if r.name == rule)


async def test_finish_stores_one_result_and_claims_are_exclusive(
    build: Build, later: Later
) -> None:
    store = build().store
    await store.add("g", "a", META, REC, 2, 5.0)
    assert await store.finish("g", _result(0, META, ["a", "b"])) is None  # not as read
    assert await store.claim("g", "t1", 5.0)
    assert not await store.claim("g", "t2", 5.0)
    assert not await store.renew("g", "t2", 5.0) and await store.renew("g", "t1", 5.0)
    await store.release("g", "t2")  # not its claim: a no-op
    assert not await store.claim("g", "t2", 5.0)
    await store.release("g", "t1")
    assert await store.claim("g", "t2", 0.2)
    await later(0.4)
    assert await store.claim("g", "t3", 5.0)  # an expired claim is taken over
    first = _result(0, META, ["a"])
    assert await store.finish("g", first) == first
    assert await store.finish("g", _result(0, META.model_copy(update={"method": "mmr"}),
                                           ["a"])) == first  # a result already there wins
    assert await store.claim("g", "t4", 5.0)  # finish dropped the claim with the round
    assert await store.poll("g", 0) == (first, 0)


# -- the assembler on either store ---------------------------------------------------------------


async def test_shuffled_members_equal_reweight_on_the_ordered_group(
    assembler: GroupAssembler, engine: ReweightEngine
) -> None:
    rng = random.Random(1)
    groups = [
        embedded_group(f"g{i}", 8, rng, method=m, advantages=a)
        for i, (m, a) in enumerate([("dra", "none"), ("mmr", "grpo"), ("dra", "dr_grpo")] * 4)
    ]
    texts = ["x = 2, so 4.", "Two squared is 4.", "The answer is 5.", "Hence 4.", "4"]
    groups.append(
        [
            MemberSubmission("text", f"m{i}", 5, float(i % 2), completion=t, advantages="grpo")
            for i, t in enumerate(texts)
        ]
    )
    members = [m for g in groups for m in g]
    rng.shuffle(members)
    results = await asyncio.gather(*(assembler.submit(m) for m in members))

    for g in groups:
        want = (await engine.areweight(ordered_request(g))).groups[0]
        ordered = sorted(m.member_id for m in g)
        for m in g:
            got = next(r for r in results if (r.group_id, r.member_id) == (m.group_id, m.member_id))
            i = ordered.index(m.member_id)
            assert got.complete and got.reason is None and got.members == len(g)
            assert got.raw_reward == m.reward
            assert got.reward == pytest.approx(want.rewards[i], abs=1e-6)
            if want.advantages is None:
                assert got.advantage is None
            else:
                assert got.advantage == pytest.approx(want.advantages[i], abs=1e-6)
            assert got.stats is not None
            assert got.stats.mean_similarity == pytest.approx(want.stats.mean_similarity, abs=1e-6)
    assert assembler.stats.groups_computed == len(groups)
    assert assembler.waiting == 0 and assembler.open_groups == 0


async def test_member_ids_order_as_strings(assembler: GroupAssembler) -> None:
    """"10" sorts before "2": the answer follows string order, not numeric."""
    rewards = {"1": 1.0, "10": 0.0, "2": 1.0}
    vecs = {"1": [1.0, 0.0], "10": [1.0, 0.01], "2": [0.0, 1.0]}
    subs = [
        MemberSubmission("ord", mid, 3, r, embedding=vecs[mid], method="none", advantages="grpo")
        for mid, r in rewards.items()
    ]
    got = {r.member_id: r for r in await asyncio.gather(*(assembler.submit(s) for s in subs))}
    want = advantages(torch.tensor([1.0, 0.0, 1.0]), "grpo").tolist()  # order 1, 10, 2
    assert [got[k].advantage for k in ("1", "10", "2")] == pytest.approx(want, abs=1e-6)


async def test_retries_before_and_after_completion_get_the_same_answer(
    assembler: GroupAssembler,
) -> None:
    g = embedded_group("idem", 3, random.Random(2), advantages="grpo")
    first = asyncio.create_task(assembler.submit(g[0]))
    await waiting(assembler, 1)
    retry_while_open = asyncio.create_task(assembler.submit(g[0]))
    rest = await asyncio.gather(assembler.submit(g[1]), assembler.submit(g[2]))
    a, b = await first, await retry_while_open
    assert a == b and a.complete
    assert await assembler.submit(g[0]) == a  # after completion
    assert await assembler.submit(g[2]) == rest[1]
    assert assembler.stats.groups_computed == 1


async def test_conflicts_name_the_field(assembler: GroupAssembler) -> None:
    g = embedded_group("conf", 3, random.Random(3))
    open_ = asyncio.create_task(assembler.submit(g[0]))
    await waiting(assembler, 1)
    for change, field in [
        ({"reward": g[0].reward + 1}, "reward"),
        ({"embedding": [1.0] * 8}, "embedding"),
    ]:
        with pytest.raises(Conflict) as e:
            await assembler.submit(dataclasses.replace(g[0], **change))
        assert e.value.field == field and e.value.http_status == 409
    for change, field in [
        ({"group_size": 4}, "group_size"),
        ({"method": "mmr"}, "method"),
        ({"params": {"eps": 0.5}}, "params"),
        ({"advantages": "grpo"}, "advantages"),
        ({"embedding": None, "completion": "text"}, "completion"),
        ({"embedding": [1.0] * 4}, "embedding"),
    ]:
        with pytest.raises(PreconditionFailed) as e:
            await assembler.submit(dataclasses.replace(g[1], **change))
        assert e.value.field == field and e.value.grpc_code == "FAILED_PRECONDITION"
    # explicit default params are the same params
    same = dataclasses.replace(g[1], params={"eps": 1e-6})
    done = await asyncio.gather(assembler.submit(same), assembler.submit(g[2]))
    assert all(r.complete for r in done) and (await open_).complete
    assert assembler.stats.size_mismatch["declared"] == 1


async def test_a_member_after_its_round_was_answered_opens_the_next_round(
    assembler: GroupAssembler, caplog: pytest.LogCaptureFixture
) -> None:
    """An extra member (a group_size smaller than the members sent) never joins the answered
    round: it opens round 1, is logged at WARNING and counted; the round-0 answers stand. A
    member id reused on purpose (`reuse_ids`) with another payload is in the next round too."""
    g = embedded_group("extra", 3, random.Random(13), timeout_s=0.5)
    done = await asyncio.gather(*(assembler.submit(m) for m in g))
    assert all(r.complete and r.round == 0 and r.members == 3 for r in done)
    assert await assembler.submit(g[0]) == done[0]  # a retry of the answered round
    for rnd, extra in enumerate(
        (
            dataclasses.replace(g[2], member_id="zzz"),  # a fourth member
            dataclasses.replace(g[2], reward=g[2].reward + 0.5, reuse_ids=True),  # said so
        ),
        start=1,
    ):
        with caplog.at_level("WARNING", logger="reweighter.assembly"):
            late = await assembler.submit(extra)
        assert (late.complete, late.reason, late.round, late.members) == (False, "short", rnd, 1)
        assert late.reward == late.raw_reward == extra.reward
        assert f"it is in round {rnd}" in caplog.text
        caplog.clear()
    assert assembler.stats.size_mismatch["late"] == 2
    assert assembler.stats.groups_computed == 1
    # reuse_ids with the same payload is still a retry of the round it was last answered in
    assert await assembler.submit(dataclasses.replace(g[0], reuse_ids=True)) == done[0]


async def test_a_known_member_with_another_payload_after_its_round_is_a_conflict(
    assembler: GroupAssembler,
) -> None:
    """Issue 29 point 2: after the round was answered, the same (group_id, member_id) with
    another reward or input is a 409 naming the field, exactly as while it was open (a
    non-deterministic reward function, an id collision); other settings are the 409 of a
    member that does not fit; nothing is opened, and a retry still gets the stored answer."""
    g = embedded_group("after", 2, random.Random(15), advantages="grpo")
    done = await asyncio.gather(*(assembler.submit(m) for m in g))
    assert all(r.complete for r in done)
    conflicts = assembler.stats.conflicts
    for change, field, error in [
        ({"reward": g[0].reward + 1}, "reward", Conflict),
        ({"embedding": [1.0] * 8}, "embedding", Conflict),
        ({"method": "mmr"}, "method", PreconditionFailed),
        ({"group_size": 3}, "group_size", PreconditionFailed),
    ]:
        with pytest.raises(error) as e:
            await assembler.submit(dataclasses.replace(g[0], **change))
        assert e.value.field == field and e.value.http_status == 409
    assert assembler.stats.conflicts == conflicts + 4
    assert await assembler.store.counts() == (0, 0)  # no round was opened
    assert assembler.stats.size_mismatch["late"] == 0
    assert await assembler.submit(g[1]) == done[1]


# What each member field that changes a result is changed to (on top of `base`), and the 409 it
# gets. Derived from the fields' roles (types.MemberRole): a field added to MemberSubmission as
# shared or payload fails `test_every_field_that_changes_a_result_is_covered` until it is here.
CHANGES: dict[str, tuple[dict[str, object], dict[str, object], type[Exception]]] = {
    "group_size": ({}, {"group_size": 3}, PreconditionFailed),
    "method": ({}, {"method": "mmr"}, PreconditionFailed),
    "params": ({}, {"params": {"eps": 1e-3}}, PreconditionFailed),
    "advantages": ({}, {"advantages": "grpo"}, PreconditionFailed),
    "advantage_params": (
        {"method": "none", "advantages": "pass_at_k", "advantage_params": {"k": 1}},
        {"advantage_params": {"k": 2}},
        PreconditionFailed,
    ),
    "step": ({"step": 3}, {"step": 4}, PreconditionFailed),
    "prompt_key": ({"prompt_key": "p"}, {"prompt_key": "q"}, PreconditionFailed),
    "reward": ({}, {"reward": 7.0}, Conflict),
    "completion": ({"embedding": None, "completion": "x + y"}, {"completion": "y + x"}, Conflict),
    "embedding": ({}, {"embedding": [1.0] * 8}, Conflict),
    "answer": ({"answer": "42"}, {"answer": "43"}, Conflict),
    "quality": ({"quality": 0.5}, {"quality": 0.25}, Conflict),
}


def test_every_field_that_changes_a_result_is_covered() -> None:
    """Every member field has a role; the shared ones are GroupMeta's fields and reach the
    rebuilt request, the payload ones become the Group's lists; both are tested in CHANGES."""
    roles = {f.name: f.metadata.get("member") for f in dataclasses.fields(MemberSubmission)}
    assert None not in roles.values(), f"give every MemberSubmission field a member role: {roles}"
    assert set(CHANGES) == set(SHARED) | set(PAYLOAD), (
        "a member field that changes a result needs its row in CHANGES (its 409 is tested)"
    )
    assert set(GroupMeta.model_fields) - {"v"} == set(SHARED) | {"input", "dim", "quality"}
    request_fields = {f.name for f in dataclasses.fields(ReweightRequest)}
    group_fields = {f.name for f in dataclasses.fields(Group)}
    assert set(SHARED) - {"group_size"} <= request_fields | group_fields
    assert {group_list(name) for name in PAYLOAD} <= group_fields


STORED_META = {
    3: {
        "group_size": "int",
        "method": "str",
        "params": "dict[str, typing.Any]",
        "advantages": "str",
        "advantage_params": "dict[str, typing.Any]",
        "step": "int | None",
        "prompt_key": "str | None",
        "input": "typing.Literal['completion', 'embedding']",
        "dim": "int | None",
    },
    4: {  # a member may carry quality; the meta says whether the round's members give it
        "group_size": "int",
        "method": "str",
        "params": "dict[str, typing.Any]",
        "advantages": "str",
        "advantage_params": "dict[str, typing.Any]",
        "step": "int | None",
        "prompt_key": "str | None",
        "input": "typing.Literal['completion', 'embedding']",
        "dim": "int | None",
        "quality": "bool",
    },
}
"""GroupMeta's fields and their stored types per SCHEMA_VERSION: a new SHARED member field
changes GroupMeta (it is derived), and the records other replicas read with it."""


def test_the_stored_meta_is_derived_and_a_change_to_it_is_a_new_schema_version() -> None:
    """GroupMeta follows MemberSubmission's SHARED fields with no hand-written list; a member
    field that changes what is stored fails here until SCHEMA_VERSION is bumped (a rolling
    upgrade then refuses the other version's records instead of misreading them)."""
    fields = {
        name: str(f.annotation).replace("<class '", "").replace("'>", "")
        for name, f in GroupMeta.model_fields.items()
        if name != "v"
    }
    assert fields == STORED_META.get(SCHEMA_VERSION), (
        f"GroupMeta is now {fields}: bump records.SCHEMA_VERSION and add its row here"
    )
    assert list(fields)[: len(SHARED)] == list(SHARED)


@pytest.mark.parametrize("name", list(CHANGES))
async def test_a_member_resent_with_another_value_is_a_409_naming_it(
    assembler: GroupAssembler, name: str
) -> None:
    """While its round is open and after it was answered: a member sent again under its id with
    any field that changes a result changed (its answer too) is a 409 naming that field."""
    base, change, error = CHANGES[name]
    g = [dataclasses.replace(m, **base) for m in embedded_group(f"c-{name}", 2, random.Random(8))]
    first = asyncio.create_task(assembler.submit(g[0]))
    await waiting(assembler, 1)
    for when in ("open", "answered"):
        with pytest.raises(error) as e:
            await assembler.submit(dataclasses.replace(g[0], **change))
        assert (e.value.field, e.value.http_status, when) == (name, 409, when)
        if when == "open":
            done = [await assembler.submit(g[1]), await first]
            assert all(r.complete for r in done)
    assert await assembler.submit(g[0]) == done[1]  # the same member is still a retry


async def test_a_short_round_closes_at_the_first_deadline_for_all_its_members(
    assembler: GroupAssembler,
) -> None:
    """timeout_s is waited in full; the round then closes: every member present gets the same
    answer (raw rewards, advantages over them by the engine), and latecomers open round 1."""
    g = embedded_group("short", 4, random.Random(4), advantages="grpo", timeout_s=0.8)
    loop = asyncio.get_running_loop()
    start = loop.time()
    first = asyncio.create_task(assembler.submit(g[0]))
    await asyncio.sleep(0.3)
    second = await assembler.submit(g[1])  # answered when the first member's wait ends
    short = [await first, second]
    took = loop.time() - start
    assert 0.8 <= took < 0.8 + 1.0  # the full timeout_s, then at most the grace
    present = sorted(g[:2], key=lambda m: m.member_id)
    want = advantages(torch.tensor([m.reward for m in present]), "grpo").tolist()
    for r in short:
        m = next(x for x in g if x.member_id == r.member_id)
        assert (r.complete, r.reason, r.members, r.stats, r.round) == (
            False, "short", 2, None, 0
        )  # fmt: skip
        assert r.reward == r.raw_reward == m.reward
        assert r.advantage == pytest.approx(want[present.index(m)], abs=1e-6)
    assert assembler.stats.timeouts == 2
    assert await assembler.store.counts() == (0, 0)  # the bound is released at once
    # the latecomers do not complete the answered round: they open round 1 (and time out)
    late = await asyncio.gather(assembler.submit(g[2]), assembler.submit(g[3]))
    assert all((r.complete, r.round, r.members) == (False, 1, 2) for r in late)
    assert await assembler.submit(g[0]) == short[0]  # a retry: the same answer


async def test_a_whole_group_still_computing_at_the_deadline_says_so(
    assembler: GroupAssembler, engine: ReweightEngine
) -> None:
    """Another replica holds the compute claim (as when its encoder is slow): at the deadline
    the member is answered raw with reason "computing" and members == group_size; once the
    claim is released the group is reweighted and a retry gets the complete answer."""
    g = embedded_group("busy", 3, random.Random(14), advantages="grpo", timeout_s=0.5)
    await assembler.start()
    assert await assembler.store.claim("busy", "another replica", 30.0)
    answers = await asyncio.gather(*(assembler.submit(m) for m in g))
    rewards = [m.reward for m in sorted(g, key=lambda m: m.member_id)]
    want = advantages(torch.tensor(rewards), "grpo").tolist()
    order = sorted(m.member_id for m in g)
    for r in answers:
        assert (r.complete, r.reason, r.members, r.stats) == (False, "computing", 3, None)
        assert r.advantage == pytest.approx(want[order.index(r.member_id)], abs=1e-6)
    await assembler.store.release("busy", "another replica")
    again = await assembler.submit(g[0])
    full = (await engine.areweight(ordered_request(g))).groups[0]
    i = order.index(g[0].member_id)
    assert again.complete and again.reward == pytest.approx(full.rewards[i], abs=1e-6)


async def test_timeout_is_capped_and_defaulted(build: Build) -> None:
    asm = build(assembly_timeout_s=0.2, assembly_max_timeout_s=0.3)
    loop = asyncio.get_running_loop()
    for timeout in (None, 100.0):
        start = loop.time()
        sub = MemberSubmission(f"cap{timeout}", "a", 2, 1.0, embedding=[1.0], timeout_s=timeout)
        assert (await asyncio.wait_for(asyncio.shield(asm.submit(sub)), 5)).reason == "short"
        took = loop.time() - start
        assert (0.2 if timeout is None else 0.3) <= took < 0.3 + 1.0  # capped: 100 s asked


async def test_bounds_answer_overloaded(build: Build) -> None:
    asm = build(assembly_max_open_groups=2, assembly_max_held_members=3)
    sub = MemberSubmission("a", "1", 5, 1.0, embedding=[1.0, 0.0], timeout_s=5)
    held = [
        asyncio.create_task(asm.submit(dataclasses.replace(sub, group_id=g, member_id=m)))
        for g, m in (("a", "1"), ("b", "1"))
    ]
    await waiting(asm, 2)
    with pytest.raises(Overloaded, match="groups"):
        await asm.submit(dataclasses.replace(sub, group_id="c"))
    held.append(asyncio.create_task(asm.submit(dataclasses.replace(sub, member_id="2"))))
    await waiting(asm, 3)
    with pytest.raises(Overloaded, match="members") as e:
        await asm.submit(dataclasses.replace(sub, group_id="b", member_id="2"))
    assert e.value.http_status == 429 and e.value.grpc_code == "RESOURCE_EXHAUSTED"
    assert await asm.store.counts() == (2, 3)
    assert asm.waiting == 3 and asm.open_groups == 2
    for t in held:
        t.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    assert asm.waiting == 0 and asm.open_groups == 0


async def test_the_store_expires_open_rounds_and_results(build: Build, later: Later) -> None:
    """Nothing grows without bound: an open round lives until its latest member's deadline
    (each arrival can only extend it), results for the result TTL, on the store's clock."""
    store = build(assembly_result_ttl_s=1.0).store
    meta = GroupMeta(group_size=2, method="dra", params={}, advantages="none", input="completion",
                     dim=None)  # fmt: skip
    assert await store.add("g", "a", meta, REC, 2, ttl_s=2.0) == Added(0, 1)
    assert await store.add("h", "a", meta, REC, 1, ttl_s=2.0) == Added(0, 1)
    result = _result(0, meta, ["a"])
    assert await store.finish("h", result) == result
    assert await store.add("h", "a", meta, REC, 1, ttl_s=2.0) == Answered(0, result)
    assert await store.counts() == (1, 1)
    await later(1.2)  # the result is gone, the open round is not
    assert await store.poll("h", 0) == (None, 0)
    assert await store.add("h", "b", meta, REC, 2, ttl_s=0.3) == Added(0, 1)  # afresh: round 0
    assert isinstance(await store.add("g", "a", meta, REC, 2, ttl_s=0.1), Exists)  # stays
    assert (await store.add("g", "b", meta, REC, 2, ttl_s=2.0)).count == 2  # extends: 3.2 s
    await later(1.0)  # 2.2 s: g's first deadline passed, it is extended; h expired
    assert await store.counts() == (1, 2)
    await later(1.3)
    assert await store.counts() == (0, 0)
    assert await store.members("g") is None


@pytest.mark.parametrize(
    ("change", "field", "error"),
    [
        ({"reward": float("nan")}, "reward", InvalidInput),
        ({"reward": "1"}, "reward", InvalidInput),
        ({"embedding": None}, "completion", InvalidInput),
        ({"completion": "both"}, "completion", InvalidInput),
        ({"embedding": [0.0, 0.0]}, "embedding", InvalidInput),
        ({"embedding": [1.0, float("inf")]}, "embedding", InvalidInput),
        ({"group_size": 0}, "group_size", InvalidInput),
        ({"group_size": 10_000}, "group_size", LimitExceeded),
        ({"member_id": ""}, "member_id", InvalidInput),
        ({"group_id": "x" * 300}, "group_id", InvalidInput),
        ({"timeout_s": -1.0}, "timeout_s", InvalidInput),
        ({"method": "nope"}, "method", InvalidInput),
        ({"params": {"eps": -3}}, "params.eps", InvalidInput),
        ({"params": {"bogus": 1}}, "params.bogus", InvalidInput),
        ({"advantages": "ppo"}, "advantages", InvalidInput),
        ({"completion": "\ud800"}, "completion", InvalidInput),  # with an embedding: not both
        ({"embedding": None, "completion": "\ud800"}, "completion", InvalidInput),
        ({"embedding": None, "completion": "x" * 4_000_001}, "completion", LimitExceeded),
        ({"embedding": [[1.0, 0.0]]}, "embedding", InvalidInput),
        ({"embedding": []}, "embedding", InvalidInput),
        ({"answer": 7}, "answer", InvalidInput),
        ({"method": "outcome_ucb", "prompt_key": "p"}, "step", InvalidInput),
        ({"method": "outcome_ucb", "prompt_key": "p", "step": -1}, "step", InvalidInput),
        ({"method": "outcome_ucb", "step": 3}, "prompt_key", InvalidInput),
        ({"method": "outcome_ucb", "step": 3, "prompt_key": ""}, "prompt_key", InvalidInput),
        ({"method": "none", "advantages": "pass_at_k"}, "advantage_params.k", InvalidInput),
        ({"method": "none", "advantages": "pass_at_k", "advantage_params": {"k": 0}},
         "advantage_params.k", InvalidInput),
        ({"method": "none", "advantages": "pass_at_k", "advantage_params": {"k": 3}},
         "advantage_params.k", InvalidInput),  # above group_size 2
        ({"advantages": "pass_at_k", "advantage_params": {"k": 1}}, "advantages", InvalidInput),
        ({"advantages": "grpo", "advantage_params": {"k": 1}}, "advantage_params.k",
         InvalidInput),
    ],
)
async def test_bad_members_are_refused_naming_the_field(
    assembler: GroupAssembler, change: dict, field: str, error: type
) -> None:
    sub = MemberSubmission("bad", "a", 2, 1.0, embedding=[1.0, 0.0])
    with pytest.raises(error) as e:
        await assembler.submit(dataclasses.replace(sub, **change))
    assert e.value.field == field
    assert await assembler.store.counts() == (0, 0)  # nothing half-done


def _ucb_members(gid: str, step: int, answers: list[str | None], **kw: object) -> list:
    """A group of members for outcome_ucb (c = 1, no baseline, added to GRPO's advantages)."""
    return [
        MemberSubmission(gid, f"m{i}", len(answers), float(i == 0), embedding=[1.0, float(i)],
                         method="outcome_ucb", params={"scale": 1.0, "baseline": None},
                         advantages="grpo", answer=a, step=step, **kw)  # type: ignore[arg-type]
        for i, a in enumerate(answers)
    ]  # fmt: skip


async def test_members_carry_step_prompt_key_and_advantage_params(
    build: Build, engine: ReweightEngine
) -> None:
    """outcome_ucb and pass_at_k through members, on both stores: the answer equals /v1/reweight
    on the group in member_id order; the memory counts a step once (a retried member and a
    second round of the same step count nothing more); members must agree on step,
    prompt_key and advantage_params (409 naming the field)."""
    asm = build()
    key = f"p-{random.random()}"
    grpo = advantages(torch.tensor([1.0, 0.0, 0.0]), "grpo").tolist()

    async def run(gid: str, step: int, answers: list[str | None]) -> list[float]:
        subs = _ucb_members(gid, step, answers, prompt_key=key)
        got = await asyncio.gather(*(asm.submit(m) for m in subs))
        assert all(r.complete for r in got)
        return [r.advantage for r in got]  # type: ignore[misc]

    first = await run(f"u1-{key}", 1, ["a", "a", None])
    assert first == pytest.approx([grpo[0] + 1, grpo[1] + 1, grpo[2]], abs=1e-6)
    retry = _ucb_members(f"u1-{key}", 1, ["a", "a", None], prompt_key=key)[1]
    assert (await asm.submit(retry)).advantage == pytest.approx(first[1])
    # Step 2: "a" was seen twice at step 1 (min(1, 1/sqrt(2))), "b" never.
    second = await run(f"u2-{key}", 2, ["a", "b", "a"])
    b2 = 2**-0.5
    assert second == pytest.approx([grpo[0] + b2, grpo[1] + 1, grpo[2] + b2], abs=1e-6)
    # Another group id of step 2 (a second round, a replica's retry): the memory is unchanged.
    again = await run(f"u2b-{key}", 2, ["a", "b", "a"])
    assert again == pytest.approx(second, abs=1e-6)
    third = await run(f"u3-{key}", 3, ["b"] * 3)
    assert third == pytest.approx([grpo[0] + 1, grpo[1] + 1, grpo[2] + 1], abs=1e-6)  # b: 1

    # pass_at_k through members: n = 4, c = 1, k = 2: success 1, failures -1/3.
    subs = [
        MemberSubmission(f"pk-{key}", f"m{i}", 4, float(i == 1), embedding=[1.0, float(i)],
                         method="none", advantages="pass_at_k", advantage_params={"k": 2})
        for i in range(4)
    ]  # fmt: skip
    got = await asyncio.gather(*(asm.submit(m) for m in subs))
    assert [r.advantage for r in got] == pytest.approx([-1 / 3, 1.0, -1 / 3, -1 / 3])

    # Members of one group must agree.
    g = _ucb_members(f"agree-{key}", 4, ["a", "b"], prompt_key=key)
    held = asyncio.create_task(asm.submit(g[0]))
    await waiting(asm, 1)
    for change, field in [
        ({"step": 5}, "step"),
        ({"prompt_key": key + "x"}, "prompt_key"),
        ({"method": "none", "params": {}, "advantages": "pass_at_k",
          "advantage_params": {"k": 1}}, "method"),
    ]:  # fmt: skip
        with pytest.raises(PreconditionFailed) as e:
            await asm.submit(dataclasses.replace(g[1], **change))
        assert e.value.field == field and e.value.http_status == 409
    await asm.submit(g[1])
    assert (await held).complete
    k = dataclasses.replace(subs[0], group_id=f"pk2-{key}")
    held = asyncio.create_task(asm.submit(k))
    await waiting(asm, 1)
    with pytest.raises(PreconditionFailed) as e:
        await asm.submit(dataclasses.replace(subs[1], group_id=k.group_id,
                                             advantage_params={"k": 3}))  # fmt: skip
    assert e.value.field == "advantage_params"
    rest = [dataclasses.replace(m, group_id=k.group_id) for m in subs[1:]]
    await asyncio.gather(*(asm.submit(m) for m in rest))
    assert (await held).complete


def _quality_members(gid: str, method: str, rng: random.Random) -> list[MemberSubmission]:
    """Five members of one group whose reward is a quality (right 1, wrong 0) plus a format
    term (1 or 0): three copies of one right answer, a formatted wrong answer, an unformatted
    right one; ids not in string order."""
    rows = [(1.0, 1.0, "4", [1.0, 0.0]), (1.0, 1.0, "4", [1.0, 0.0]), (1.0, 1.0, "4", [1.0, 0.0]),
            (0.0, 1.0, "5", [0.0, 1.0]), (1.0, 0.0, "2+2", [0.6, 0.8])]  # fmt: skip
    return [
        MemberSubmission(gid, f"{rng.randrange(10**6)}-{i}", len(rows), q + rest,
                         embedding=vec, method=method, answer=answer, quality=q,
                         advantages="grpo")
        for i, (q, rest, answer, vec) in enumerate(rows)
    ]  # fmt: skip


def _group_of(members: list[MemberSubmission], quality: bool) -> ReweightRequest:
    """/v1/reweight's request for the members in member_id order, with or without quality."""
    ms = sorted(members, key=lambda m: m.member_id)
    group = Group(rewards=[m.reward for m in ms], embeddings=[m.embedding for m in ms],
                  answers=[m.answer for m in ms],
                  quality=[m.quality for m in ms] if quality else None)  # fmt: skip
    return ReweightRequest([group], ms[0].method, {}, "grpo")


@pytest.mark.parametrize("method", ["dra", "mmr", "darling"])
async def test_members_carry_quality(
    assembler: GroupAssembler, engine: ReweightEngine, method: str
) -> None:
    """Issue 49: members that give quality get /v1/reweight's answer for the whole group with
    quality (not the whole reward's), shuffled, on both stores; a group is all or none: a
    member without quality where the round's members give it (and the reverse) is a 409
    naming quality, and the round still completes with its own members."""
    rng = random.Random(49)
    g = _quality_members(f"q-{method}", method, rng)
    shuffled = list(g)
    rng.shuffle(shuffled)
    held = [asyncio.create_task(assembler.submit(m)) for m in shuffled[:-1]]
    await waiting(assembler, len(held))
    with pytest.raises(PreconditionFailed) as e:  # the last member, without its quality
        await assembler.submit(dataclasses.replace(shuffled[-1], quality=None))
    assert (e.value.field, e.value.http_status) == ("quality", 409)
    assert "give quality" in str(e.value)
    got = await asyncio.gather(*held, assembler.submit(shuffled[-1]))
    by_id = {r.member_id: r for r in got}
    want = (await engine.areweight(_group_of(g, quality=True))).groups[0]
    whole = (await engine.areweight(_group_of(g, quality=False))).groups[0]
    ids = sorted(m.member_id for m in g)
    assert [by_id[i].reward for i in ids] == pytest.approx(want.rewards, abs=1e-6)
    assert [by_id[i].advantage for i in ids] == pytest.approx(want.advantages, abs=1e-6)
    assert all(by_id[i].complete and by_id[i].raw_reward == m.reward
               for i, m in zip(ids, sorted(g, key=lambda m: m.member_id), strict=True))  # fmt: skip
    assert want.rewards != pytest.approx(whole.rewards, abs=1e-3)  # quality changed the answer
    # The reverse: a round of members without quality refuses one that gives it.
    plain = [dataclasses.replace(m, group_id=f"p-{method}", quality=None) for m in g]
    first = asyncio.create_task(assembler.submit(plain[0]))
    await waiting(assembler, 1)
    with pytest.raises(PreconditionFailed) as e:
        await assembler.submit(dataclasses.replace(plain[1], quality=1.0))
    assert e.value.field == "quality" and "give no quality" in str(e.value)
    rest = await asyncio.gather(*(assembler.submit(m) for m in plain[1:]))
    answers = {r.member_id: r.reward for r in [await first, *rest]}
    assert [answers[i] for i in ids] == pytest.approx(whole.rewards, abs=1e-6)


@pytest.mark.slow
async def test_ten_thousand_members_wait_without_threads(engine: ReweightEngine) -> None:
    """A verl step has batch x n members in flight: they must cost futures, not threads. A
    property of the assembler's waiting, not of a store: run on the in-process one (the Redis
    store's scripted adds would only make it slower on a loaded machine)."""
    s = settings()
    assembler = GroupAssembler(engine, make_store(s), s)
    import threading

    groups, size = 1000, 11  # 10 of 11 members arrive first: 10,000 waiting
    threads = threading.active_count()
    subs = [
        MemberSubmission(f"big{g}", f"{m:02d}", size, float(m % 2), embedding=[1.0, m, g % 7])
        for g in range(groups)
        for m in range(size)
    ]
    first = [asyncio.create_task(assembler.submit(s)) for s in subs if s.member_id != "10"]
    for _ in range(200):
        await asyncio.sleep(0.05)
        if assembler.waiting == 10_000:
            break
    assert assembler.waiting == 10_000 and assembler.open_groups == groups
    assert threading.active_count() <= threads + 2
    last = [s for s in subs if s.member_id == "10"]
    results = await asyncio.wait_for(
        asyncio.gather(*first, *(assembler.submit(s) for s in last)), 120
    )
    assert len(results) == groups * size and all(r.complete for r in results)
    assert assembler.stats.groups_computed == groups and assembler.waiting == 0
    await assembler.aclose()


async def test_closing_answers_waiters_with_a_retryable_error(build: Build) -> None:
    asm = build()
    sub = MemberSubmission("stop", "a", 2, 1.0, embedding=[1.0, 0.0], timeout_s=30)
    held = asyncio.create_task(asm.submit(sub))
    await waiting(asm, 1)
    await asm.aclose()
    with pytest.raises(StoreUnavailable, match="stopping") as e:
        await asyncio.wait_for(held, 2)
    assert e.value.http_status == 503


@pytest.mark.parametrize(
    ("reward", "embedding"),
    [(float("nan"), [1.0, 0.0]), ("1", [1.0, 0.0]), (10**400, [1.0, 0.0]),
     (1.0, [0.0, 0.0]), (1.0, [1.0, float("inf")])],
)  # fmt: skip
def test_a_member_is_judged_by_the_request_rules(reward: object, embedding: list) -> None:
    """One validation path: check_member fails with the class and message check_request gives
    the same values in a one-member group; only the field differs (flat for a member)."""
    from reweighter.engine.checks import check_member, check_request
    from reweighter.limits import Limits
    from reweighter.types import Group, ReweightRequest

    limits = Limits.from_settings(settings())
    sub = MemberSubmission("g", "a", 2, reward, embedding=embedding)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as member:
        check_member(sub, limits, default_timeout_s=1.0, max_timeout_s=2.0)
    with pytest.raises(InvalidInput) as request:
        check_request(ReweightRequest([Group([reward], embeddings=[embedding])]), limits)  # type: ignore[list-item]
    assert member.value.message == request.value.message
    assert (member.value.field, request.value.field) in (
        ("reward", "groups[0].rewards[0]"), ("embedding", "groups[0].embeddings[0]")
    )  # fmt: skip
