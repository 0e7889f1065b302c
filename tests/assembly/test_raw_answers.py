"""A member answered raw (its round closed short, or still computing at its deadline) gets the
advantages /v1/reweight gives the same rewards with method "none", bit for bit: the assembly
takes them from the engine's one estimator path (engine/compute.py `raw_advantages` ->
`advantages_of`), not from an estimator call of its own (it once computed them in float32
beside the engine's float64, and they differed in the low digits)."""

from __future__ import annotations

import asyncio
import random

import pytest

from reweighter.assembly import GroupAssembler, MemberSubmission
from reweighter.engine import ReweightEngine
from reweighter.engine.compute import raw_advantages
from reweighter.types import Group, ReweightRequest

from .conftest import Build

KINDS = [("grpo", {}), ("dr_grpo", {}), ("pass_at_k", {"k": 2, "success_threshold": 0.5})]


def reweighted(
    engine: ReweightEngine, rewards: list[float], kind: str, params: dict[str, object]
) -> list[float] | None:
    """/v1/reweight's advantages for one group of these rewards, method "none"."""
    emb = [[1.0, float(i)] for i in range(len(rewards))]
    req = ReweightRequest([Group(rewards=rewards, embeddings=emb)], "none", {}, kind, params)
    return engine.reweight(req).groups[0].advantages


@pytest.mark.parametrize(("kind", "params"), KINDS)
def test_raw_advantages_are_reweights_bit_for_bit(
    engine: ReweightEngine, kind: str, params: dict[str, object]
) -> None:
    rng = random.Random(7)
    for rewards in (
        [rng.random() for _ in range(5)],
        [1e6 + rng.random() * 1e-3 for _ in range(4)],  # float32 loses these differences
        [0.0, 1.0, 1.0],
    ):
        want = reweighted(engine, rewards, kind, params)
        assert want is not None
        assert raw_advantages(rewards, kind, params) == want  # exact, not approx
    assert raw_advantages([0.3, 0.1], "none", {}) is None


async def test_a_short_rounds_answer_is_reweight_over_the_members_present(
    build: Build, engine: ReweightEngine
) -> None:
    """Three of four members come; at the deadline each gets the advantage /v1/reweight gives
    the three present (member_id order, method "none"), exactly; pass_at_k's k = 4 is capped
    at the 3 present."""
    asm: GroupAssembler = build()
    rewards = {"a": 1e6 + 0.0001, "b": 1e6 + 0.0003, "c": 1e6 + 0.0002}
    pass_at_k = {"k": 4, "success_threshold": 1e6 + 0.00025}  # b succeeds
    for kind, params in [("dr_grpo", {}), ("pass_at_k", pass_at_k)]:
        gid = f"short-{kind}"
        subs = [
            MemberSubmission(gid, mid, 4, r, embedding=[1.0, float(i)], method="none",
                             advantages=kind, advantage_params=params, timeout_s=0.5)
            for i, (mid, r) in enumerate(rewards.items())
        ]  # fmt: skip
        got = await asyncio.gather(*(asm.submit(s) for s in subs))
        capped = {**params, "k": 3} if "k" in params else params
        want = reweighted(engine, list(rewards.values()), kind, capped)
        assert [(r.member_id, r.complete, r.members) for r in got] == [
            ("a", False, 3), ("b", False, 3), ("c", False, 3)
        ]  # fmt: skip
        assert [r.advantage for r in got] == want


async def test_a_member_answered_alone_at_its_deadline_is_reweight_over_those_present(
    build: Build, engine: ReweightEngine
) -> None:
    """Another replica holds the compute claim of a whole round: at the deadline each member
    is answered raw ("computing") with /v1/reweight's advantages over the whole group."""
    asm: GroupAssembler = build()
    await asm.start()
    rewards = {"x": 0.25, "y": 0.75, "z": 0.5}
    assert await asm.store.claim("busy", "another replica", 30.0)
    subs = [
        MemberSubmission("busy", mid, 3, r, embedding=[1.0, float(i)], method="none",
                         advantages="grpo", timeout_s=0.5)
        for i, (mid, r) in enumerate(rewards.items())
    ]  # fmt: skip
    got = await asyncio.gather(*(asm.submit(s) for s in subs))
    assert all((r.complete, r.reason, r.members) == (False, "computing", 3) for r in got)
    assert [r.advantage for r in got] == reweighted(engine, list(rewards.values()), "grpo", {})
