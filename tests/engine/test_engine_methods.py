"""The engine with the issue-30 methods: answers, prompt keys, steps, advantage_params, the new
stats, field-named errors, and outcome_ucb's memory across steps, retries, prompt keys, two
replicas sharing a real Redis and a service restart. Groups come with embeddings, so no model
is loaded."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest

from reweighter.config import Settings
from reweighter.engine import ReweightEngine
from reweighter.errors import InvalidInput, MemoryUnavailable
from reweighter.types import Group, ReweightRequest

# Unit vectors: items 0 and 1 identical, 2 and 3 orthogonal to everything.
E4 = [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


def engine(**kw: Any) -> ReweightEngine:
    return ReweightEngine(Settings(redis_url=None, **kw), method_device="cpu")


def req(groups: list[Group], **kw: Any) -> ReweightRequest:
    return ReweightRequest(groups=groups, **kw)


def field_of(e: pytest.ExceptionInfo[InvalidInput]) -> str | None:
    return e.value.field


# --- darling and the stats --------------------------------------------------------------------


def test_darling_with_answers_and_without() -> None:
    eng = engine()
    g = Group(rewards=[1.0, 1.0, 0.5, 0.0], embeddings=E4, answers=["4", "4", "5", None])
    out = eng.reweight(req([g], method="darling")).groups[0]
    # Hand case of test_methods_classes: d = (2/3, 2/3, 1, 0 -> the floor); 0 x 0.1 = 0.
    assert out.rewards == pytest.approx([2 / 3, 2 / 3, 0.5, 0.0])
    # The unanswered item with a positive reward keeps only the floor's share (issue 40),
    # while without answers (classes from embeddings) every item counts as answered.
    g = Group(rewards=[1.0, 1.0, 0.5, 0.8], embeddings=E4, answers=["4", "4", "5", None])
    out = eng.reweight(req([g], method="darling")).groups[0]
    assert out.rewards == pytest.approx([2 / 3, 2 / 3, 0.5, 0.08])
    g = Group(rewards=[1.0, 1.0, 0.5, 0.8], embeddings=E4)
    assert eng.reweight(req([g], method="darling")).groups[0].rewards == pytest.approx(
        [2 / 3, 2 / 3, 0.5, 0.8])
    g = Group(rewards=[1.0, 1.0, 0.5, 0.0], embeddings=E4, answers=["4", "4", "5", None])
    out = eng.reweight(req([g], method="darling")).groups[0]
    assert out.stats.classes == 3 and out.stats.distinct_answers == 2
    # n = 4, sum of max(0, s) = 4 + 2 (the identical pair): 16 / 6.
    assert out.stats.effective_size == pytest.approx(16 / 6)
    # Without answers: classes from the embeddings, {0, 1}, {2}, {3}: the same numbers.
    g = Group(rewards=[1.0, 1.0, 0.5, 0.0], embeddings=E4)
    out = eng.reweight(req([g], method="darling")).groups[0]
    assert out.rewards == pytest.approx([2 / 3, 2 / 3, 0.5, 0.0])
    assert out.stats.classes == 3 and out.stats.distinct_answers is None
    # DRA reports no classes; the answers still give distinct_answers.
    g = Group(rewards=[1.0, 0.0], embeddings=E4[2:], answers=["a", "a"])
    stats = eng.reweight(req([g], method="dra")).groups[0].stats
    assert stats.classes is None and stats.distinct_answers == 1


def test_bad_answers_are_refused_naming_the_field() -> None:
    eng = engine()
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([Group(rewards=[1.0, 0.0], embeddings=E4[:2], answers=["a"])]))
    assert field_of(e) == "groups[0].answers"
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([Group(rewards=[1.0, 0.0], embeddings=E4[:2], answers=["a", 3])]))
    assert field_of(e) == "groups[0].answers[1]"
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([Group(rewards=[1.0], embeddings=E4[:1], answers="a")]))
    assert field_of(e) == "groups[0].answers"
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([Group(rewards=[1.0], embeddings=E4[:1], prompt_key="")]))
    assert field_of(e) == "groups[0].prompt_key"


# --- pass@k -----------------------------------------------------------------------------------


def test_pass_at_k_through_the_engine() -> None:
    eng = engine()
    g = Group(rewards=[0.0, 1.0, 0.0, 0.0], embeddings=E4)
    out = eng.reweight(
        req([g], method="none", advantages="pass_at_k", advantage_params={"k": 2})
    ).groups[0]
    assert out.advantages == pytest.approx([-1 / 3, 1.0, -1 / 3, -1 / 3])
    for params, fld in (
        ({"k": 5}, "advantage_params.k"),
        ({"k": 0}, "advantage_params.k"),
        ({}, "advantage_params.k"),
        ({"k": 2, "kk": 1}, "advantage_params.kk"),
        ({"k": 2, "success_threshold": "x"}, "advantage_params.success_threshold"),
    ):
        with pytest.raises(InvalidInput) as e:
            eng.reweight(req([g], method="none", advantages="pass_at_k", advantage_params=params))
        assert field_of(e) == fld, params
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([g], method="dra", advantages="pass_at_k", advantage_params={"k": 2}))
    assert field_of(e) == "advantages"
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([g], advantages="grpo", advantage_params={"k": 2}))
    assert field_of(e) == "advantage_params.k"


# --- outcome_ucb ------------------------------------------------------------------------------


def ucb(key: str, step: int, answers: list[str | None], rewards: list[float] | None = None) -> Any:
    n = len(answers)
    g = Group(
        rewards=rewards or [0.0] * n,
        embeddings=[[1.0, float(i)] for i in range(n)],
        answers=answers,
        prompt_key=key,
    )
    return req([g], method="outcome_ucb", params={"scale": 1.0, "baseline": None}, step=step)


def bonus(n_before: int) -> float:
    """The paper's min(1, 1/sqrt(N)), N the count at earlier steps."""
    return min(1.0, 1.0 / math.sqrt(n_before)) if n_before else 1.0


def test_outcome_ucb_across_steps_retries_and_prompt_keys() -> None:
    eng = engine()
    first = eng.reweight(ucb("p", 1, ["a", "a", "b", None])).groups[0].rewards
    assert first == pytest.approx([1.0, 1.0, 1.0, 0.0])  # nothing seen before; null: no bonus
    second = eng.reweight(ucb("p", 2, ["a", "b", "c"])).groups[0].rewards
    assert second == pytest.approx([bonus(2), bonus(1), bonus(0)])
    assert second == pytest.approx([1 / math.sqrt(2), 1.0, 1.0])
    assert eng.reweight(ucb("p", 2, ["a", "b", "c"])).groups[0].rewards == second  # a retry
    third = eng.reweight(ucb("p", 3, ["a", "c"])).groups[0].rewards
    assert third == pytest.approx([1 / math.sqrt(3), bonus(1)])  # step 2 counted once
    other = eng.reweight(ucb("q", 3, ["a"])).groups[0].rewards
    assert other == pytest.approx([1.0])  # another prompt key: nothing seen
    assert eng.memory.size() == 2


def test_outcome_ucb_needs_its_fields() -> None:
    eng = engine()
    g = Group(rewards=[1.0], embeddings=[[1.0]], answers=["a"])
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([g], method="outcome_ucb", step=1))
    assert field_of(e) == "groups[0].prompt_key"
    g = Group(rewards=[1.0], embeddings=[[1.0]], prompt_key="p")
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([g], method="outcome_ucb", step=1))
    assert field_of(e) == "groups[0].answers"
    g = Group(rewards=[1.0], embeddings=[[1.0]], prompt_key="p", answers=["a"])
    with pytest.raises(InvalidInput) as e:
        eng.reweight(req([g], method="outcome_ucb"))
    assert field_of(e) == "step"
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidInput) as e:
            eng.reweight(req([g], method="outcome_ucb", step=bad))
        assert field_of(e) == "step"
    # A refused request never counted: step 1 still sees nothing (c = 0.2, b0 = 0.5: +0.1).
    assert eng.reweight(req([g], method="outcome_ucb", step=1)).groups[0].rewards == [
        pytest.approx(1.1)
    ]


def test_outcome_ucb_goes_after_the_estimator_as_the_paper() -> None:
    """target "advantage" (default): A = GRPO(r) + c (b - b0), the rewards unchanged; an
    unsolved group (rewards all 0) still gets the term. target "reward": GRPO(r + term)."""
    from reweighter.methods import advantages

    eng = engine()
    seen = Group(rewards=[0.0] * 4, embeddings=E4, answers=["b"] * 4, prompt_key="p")
    eng.reweight(req([seen], method="outcome_ucb", step=1))  # b seen 4 times: b(4) = 1/2
    g = Group(rewards=[0.0, 0.0, 0.0], embeddings=E4[:3], answers=["a", "b", None], prompt_key="p")
    out = eng.reweight(req([g], method="outcome_ucb", step=2, advantages="grpo")).groups[0]
    assert out.rewards == [0.0, 0.0, 0.0]
    # c = 0.2, b0 = 0.5: a never seen: 0.2 * (1 - 0.5); b: 0.2 * (1/2 - 0.5); null: nothing.
    assert out.advantages == pytest.approx([0.1, 0.0, 0.0])
    solved = Group(rewards=[1.0, 0.0], embeddings=E4[2:], answers=["c", "b"], prompt_key="p")
    out = eng.reweight(req([solved], method="outcome_ucb", step=3, advantages="grpo")).groups[0]
    grpo = advantages([1.0, 0.0], "grpo").tolist()  # +-0.7069...: the term is not rescaled
    # Before step 3: c never seen (+0.1); b 4 + 1 times: 0.2 * (1/sqrt(5) - 0.5).
    assert out.advantages == pytest.approx([grpo[0] + 0.1, grpo[1] + 0.2 * (5**-0.5 - 0.5)])
    shaped = eng.reweight(
        req([g], method="outcome_ucb", step=2, advantages="grpo", params={"target": "reward"})
    ).groups[0]
    assert shaped.rewards == pytest.approx([0.1, 0.0, 0.0])
    assert shaped.advantages == pytest.approx(advantages([0.1, 0.0, 0.0], "grpo").tolist())
    mean = eng.reweight(
        req([g], method="outcome_ucb", step=2, advantages="dr_grpo", params={"baseline": "mean"})
    ).groups[0]
    # UCB-Mean over the answered items: b = 1, 1/2, mean 3/4: terms +0.05, -0.05.
    assert mean.advantages == pytest.approx([0.05, -0.05, 0.0])


def _redis_engine(url: str, prefix: str) -> ReweightEngine:
    return ReweightEngine(Settings(redis_url=url, memory_prefix=prefix), method_device="cpu")


def test_two_replicas_share_the_memory_and_a_restart_keeps_it(shared_redis_url: str) -> None:
    prefix = f"test:mem:{uuid.uuid4().hex}:"
    one, two = _redis_engine(shared_redis_url, prefix), _redis_engine(shared_redis_url, prefix)
    try:
        one.reweight(ucb("p", 1, ["a", "a", "b"]))
        # The same step through the other replica (a retry behind a load balancer): once.
        assert two.reweight(ucb("p", 1, ["a", "a", "b"])).groups[0].rewards == [1.0, 1.0, 1.0]
        got = two.reweight(ucb("p", 2, ["a"])).groups[0].rewards
        assert got == pytest.approx([1 / math.sqrt(2)])
        one.close()
        restarted = _redis_engine(shared_redis_url, prefix)  # the service restarted
        got = restarted.reweight(ucb("p", 3, ["a", "b"])).groups[0].rewards
        assert got == pytest.approx([1 / math.sqrt(3), 1.0])
        restarted.close()
    finally:
        two.close()


def test_a_redis_outage_fails_the_request_never_guesses(redis_server: Any) -> None:
    eng = _redis_engine(redis_server.url, f"test:mem:{uuid.uuid4().hex}:")
    eng.reweight(ucb("p", 1, ["a"]))
    redis_server.stop()
    with pytest.raises(MemoryUnavailable) as e:
        eng.reweight(ucb("p", 2, ["a"]))
    assert e.value.field == "memory" and e.value.grpc_code == "UNAVAILABLE"
    assert eng.memory.errors == 1
    # Methods without memory are untouched by the outage.
    g = Group(rewards=[1.0, 0.0], embeddings=E4[2:])
    assert eng.reweight(req([g], method="dra")).groups[0].rewards == pytest.approx(
        [1.0, 0.0], abs=1e-5
    )
    eng.close()


def test_telemetry_records_the_figures() -> None:
    eng = engine()
    g = Group(rewards=[1.0, 1.0], embeddings=E4[:2], answers=["a", "a"])
    h = Group(rewards=[1.0, 0.0], embeddings=E4[2:], answers=["a", "b"])
    eng.reweight(req([g, h], method="darling", advantages="grpo"))
    got = eng.telemetry.drain()
    assert got["distinct_answers"] == [1, 2]
    assert got["classes"] == [1, 2]
    assert got["effective_size"] == pytest.approx([1.0, 2.0])
    assert got["zero_advantage_share"] == [0.5]  # g: equal rewards -> advantages 0
    assert eng.telemetry.drain()["classes"] == []
