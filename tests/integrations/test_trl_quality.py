"""TRL's `reweighted(..., quality=...)`: the named reward functions' weighted part goes with each
group as `quality` (issue 49), computed from the same calls as the base reward (the real engine:
the session `engine` of tests/conftest.py)."""

from __future__ import annotations

import pytest

from reweighter.integrations.trl import reweighted
from reweighter.types import Group, ReweightRequest

PROMPTS = ["p"] * 4
COMPLETIONS = ["Answer: 7", "Answer: 7", "Answer: 7", "Answer: 8"]


class Recording:
    def __init__(self, inner):
        self.inner, self.requests = inner, []

    def reweight(self, request):
        self.requests.append(request)
        return self.inner.reweight(request)


calls: list[str] = []


def accuracy(prompts, completions, **_):
    calls.append("accuracy")
    return [1.0 if c.endswith("7") else 0.0 for c in completions]


def fmt(prompts, completions, **_):
    return [1.0 if c.startswith("Answer:") else None for c in completions]


def test_the_quality_terms_go_with_the_groups(engine) -> None:
    backend = Recording(engine)
    f = reweighted(accuracy, fmt, num_generations=4, backend=backend, weights=[2.0, 1.0],
                   method="darling", quality=accuracy)  # fmt: skip
    calls.clear()
    out = f(PROMPTS, COMPLETIONS)
    assert calls == ["accuracy"]  # each reward function is called once
    (request,) = backend.requests
    (group,) = request.groups
    # base = 2 * accuracy + format; quality = 2 * accuracy (its weight goes with it)
    assert list(group.rewards) == [3.0, 3.0, 3.0, 1.0]
    assert list(group.quality) == [2.0, 2.0, 2.0, 0.0]
    direct = engine.reweight(
        ReweightRequest(
            groups=[Group(rewards=[3.0, 3.0, 3.0, 1.0], completions=COMPLETIONS,
                          quality=[2.0, 2.0, 2.0, 0.0])],  # fmt: skip
            method="darling",
        )
    )
    assert out == pytest.approx(direct.groups[0].rewards, abs=1e-9)
    assert min(out[:3]) > out[3]


def test_without_quality_the_groups_carry_none(engine) -> None:
    backend = Recording(engine)
    reweighted(accuracy, fmt, num_generations=4, backend=backend)(PROMPTS, COMPLETIONS)
    assert backend.requests[0].groups[0].quality is None


def test_a_quality_that_is_not_a_reward_function_is_refused(engine) -> None:
    with pytest.raises(ValueError, match="quality: fmt is not one of the reward functions"):
        reweighted(accuracy, num_generations=4, backend=engine, quality=fmt)
