"""reweighted(): weighted base rewards, grouping, one backend call, metrics (the real engine:
the session `engine` of tests/conftest.py)."""

from __future__ import annotations

import pytest

from reweighter.integrations.options import ReweighterOptions
from reweighter.integrations.trl import ReweightedReward, reweighted
from reweighter.types import Group, ReweightRequest


class Recording:
    def __init__(self, inner):
        self.inner, self.requests = inner, []

    def reweight(self, request):
        self.requests.append(request)
        return self.inner.reweight(request)


def ones(prompts, completions, **_):
    return [1.0] * len(completions)


def has_x(prompts, completions, **_):
    return [1.0 if "x" in c else 0.0 if "y" in c else None for c in completions]


PROMPTS = ["p1"] * 3 + ["p2"] * 3
COMPLETIONS = ["x one", "x two", "y three", "x four", "y five", "z none"]


def test_weighted_base_rewards_and_whole_groups(engine):
    backend = Recording(engine)
    f = ReweightedReward([ones, has_x], backend, num_generations=3, weights=[0.5, 2.0])
    metrics = {}
    out = f(PROMPTS, COMPLETIONS, log_metric=metrics.__setitem__)

    (request,) = backend.requests  # one call for the whole batch
    # 0.5 * 1 + 2 * has_x, where None (does not apply) adds nothing
    assert [list(g.rewards) for g in request.groups] == [[2.5, 2.5, 0.5], [2.5, 0.5, 0.5]]
    assert [list(g.completions) for g in request.groups] == [COMPLETIONS[:3], COMPLETIONS[3:]]
    assert request.method == "dra"
    direct = engine.reweight(
        ReweightRequest(
            groups=[
                Group(rewards=[2.5, 2.5, 0.5], completions=COMPLETIONS[:3]),
                Group(rewards=[2.5, 0.5, 0.5], completions=COMPLETIONS[3:]),
            ]
        )
    )
    assert out == pytest.approx([r for g in direct.groups for r in g.rewards], abs=1e-6)
    assert metrics["reweighter/base_reward"] == pytest.approx(9.0 / 6)
    assert metrics["reweighter/frac_zero_spread_base"] == 0.0
    mean_sim = sum(g.stats.mean_similarity for g in direct.groups) / 2
    assert metrics["reweighter/mean_similarity"] == pytest.approx(mean_sim, abs=1e-6)
    assert f.timings.calls == 1 and f.timings.completions == 6 and f.timings.groups == 2


def test_zero_spread_share_and_mmr_lambda(engine):
    f = reweighted(ones, num_generations=2, backend=engine)
    metrics = {}
    f(["a", "a", "b", "b"], ["same", "same", "one", "two"], log_metric=metrics.__setitem__)
    assert metrics["reweighter/frac_zero_spread_base"] == 1.0  # all base rewards are 1
    f = reweighted(has_x, num_generations=2, backend=engine, method="mmr", params={"lambda": 0.5})
    f(["a", "a", "b", "b"], ["x one", "y two", "x three", "y four"], log_metric=metrics.__setitem__)
    assert metrics["reweighter/frac_zero_spread_base"] == 0.0  # every group has a spread
    assert metrics["reweighter/lambda"] == 0.5


def test_group_size_mismatch_is_refused(engine):
    f = ReweightedReward([ones], engine, num_generations=2)
    with pytest.raises(ValueError, match="num_generations=2"):
        f(PROMPTS, COMPLETIONS)  # groups of 3: [p1, p1] then [p1, p2] would mix prompts


def test_eval_group_size_is_used_when_it_fits(engine):
    backend = Recording(engine)
    f = ReweightedReward([ones], backend, num_generations=2, num_generations_eval=3)
    f(PROMPTS, COMPLETIONS)
    assert [len(g.rewards) for g in backend.requests[0].groups] == [3, 3]


def test_advantages_mode_returns_the_backends_advantages(engine):
    backend = Recording(engine)
    f = ReweightedReward([has_x], backend, num_generations=3,
                         options=ReweighterOptions(advantages="grpo"))
    out = f(PROMPTS, COMPLETIONS)
    direct = engine.reweight(backend.requests[0])
    assert out == pytest.approx([a for g in direct.groups for a in g.advantages], abs=1e-6)
    assert sum(out[:3]) == pytest.approx(0.0, abs=1e-5)  # GRPO advantages are centred


def test_bad_weights_and_backend_are_named():
    with pytest.raises(ValueError, match="weights"):
        ReweightedReward([ones], object(), num_generations=2, weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="reweighter url 'ftp://x': expected http://host:port"):
        reweighted(ones, num_generations=2, backend="ftp://x")


def test_trl_names_it_by_name(engine):
    from trl.trainer.utils import get_callable_name

    f = ReweightedReward([ones], engine, num_generations=2, name="diverse")
    assert get_callable_name(f) == "diverse"


def last_word(prompts, completions, **_):
    """An answer extractor in TRL's reward-function convention: the last word, or None."""
    return [c.split()[-1] if c.strip() else None for c in completions]


class State:
    def __init__(self, step):
        self.global_step = step


def test_answers_prompt_keys_and_step_reach_the_service(engine):
    backend = Recording(engine)
    f = reweighted(
        ones, num_generations=3, backend=backend, method="outcome_ucb", answer_func=last_word,
        params={"scale": 1.0, "baseline": None},
    )
    metrics = {}
    prompts = ["p1"] * 3 + ["p2"] * 3
    out = f(prompts, ["a 4", "b 4", "c 5", "d 7", "e 7", " "],
            trainer_state=State(10), log_metric=metrics.__setitem__)
    (request,) = backend.requests
    assert request.step == 10
    assert [g.answers for g in request.groups] == [["4", "4", "5"], ["7", "7", None]]
    keys = [g.prompt_key for g in request.groups]
    assert len(set(keys)) == 2 and all(len(k) == 64 for k in keys)
    assert out == [2.0, 2.0, 2.0, 2.0, 2.0, 1.0]  # nothing seen before: bonus 1; None: none
    assert metrics["reweighter/distinct_answers"] == 1.5  # (2 + 1) / 2
    assert 1.0 <= metrics["reweighter/effective_size"] <= 3.0
    # The next step sees step 10's answers: "4" twice before (min(1, 1/sqrt(2))), "5" once (1).
    out = f(["p1"] * 3, ["a 4", "b 5", "c 6"], trainer_state=State(11))
    assert out == pytest.approx([1 + 1 / 2**0.5, 2.0, 2.0])


def test_darling_and_pass_at_k_from_trl(engine):
    f = reweighted(has_x, num_generations=3, backend=engine, method="darling",
                   answer_func=last_word)
    metrics = {}
    out = f(["p"] * 3, ["x 4", "x 4", "x 5"], log_metric=metrics.__setitem__)
    assert out == pytest.approx([0.5, 0.5, 1.0])  # d = (1/2, 1/2, 1)
    assert metrics["reweighter/classes"] == 2.0
    f = reweighted(has_x, num_generations=4, backend=engine, method="none",
                   advantages="pass_at_k", advantage_params={"k": 2})
    out = f(["p"] * 4, ["y", "x", "y", "y"], log_metric=metrics.__setitem__)
    assert out == pytest.approx([-1 / 3, 1.0, -1 / 3, -1 / 3])
    assert metrics["reweighter/frac_zero_advantage"] == 0.0
