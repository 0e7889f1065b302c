"""slime (THUDM/slime): diversity-aware rewards through `--custom-reward-post-process-path`.

    --custom-reward-post-process-path reweighter.integrations.slime.post_process_rewards

slime calls the hook as `f(args, samples) -> (raw_rewards, rewards)` with the WHOLE rollout
batch (every `Sample` carries its `group_index`), before advantages are computed; `rewards` is
what the advantage estimator uses. So there is nothing to assemble: one /v1/reweight call per
batch, groups keyed by `group_index`, members in `Sample.index` order. The client is configured
from the environment (ReweighterOptions.from_env: REWEIGHTER_URL, REWEIGHTER_API_KEY,
REWEIGHTER_TIMEOUT_S, REWEIGHTER_LONG_TEXT, REWEIGHTER_METHOD, REWEIGHTER_PARAMS); the advantages
follow slime's own flags (below), so REWEIGHTER_ADVANTAGES is refused, naming it.

slime's default post-processing normalises rewards per group for grpo/gspo/cispo (and
reinforce_plus_plus_baseline) when `--rewards-normalization` is on, dividing by the std when
`--grpo-std-normalization` is on. This hook keeps that contract but applies it to the
reweighted rewards, computed by the service's estimator (`grpo`: (r - mean) / (std + 1e-4),
sample std; `dr_grpo`: r - mean), so slime's advantage sees the diversity-aware signal.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..client import Reweighter
from ..types import DEFAULT_METHOD
from ._stacks import answer_or_none, prompt_key, reweight_by_key
from .options import ReweighterOptions

_NORMALISED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
_STD_NORMALISED = ("grpo", "gspo", "cispo")


def advantage_kind(args: Any) -> str:
    """The service estimator that matches slime's default post-processing for these args."""
    estimator = getattr(args, "advantage_estimator", None)
    if estimator not in _NORMALISED or not getattr(args, "rewards_normalization", False):
        return "none"
    if estimator in _STD_NORMALISED and getattr(args, "grpo_std_normalization", False):
        return "grpo"
    return "dr_grpo"


def _reward_value(sample: Any, args: Any) -> float:
    # Sample.get_reward_value(args): `reward`, or `reward[args.reward_key]` for dict rewards.
    value = sample.get_reward_value(args)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"sample reward must be a number (set --reward-key for dict rewards), got {value!r}"
        )
    return float(value)


def _group_key(i: int, sample: Any) -> tuple[str, int]:
    # A sample without a group is a group of one (its reward passes through unchanged).
    return ("g", sample.group_index) if sample.group_index is not None else ("solo", i)


def _order(i: int, sample: Any) -> tuple[int, int]:
    # Sample.index (slime's global sample index) orders a group's members; batch order if unset.
    return (0, sample.index) if sample.index is not None else (1, i)


def _answer(sample: Any) -> str | None:
    """The sample's extracted final answer, where a custom reward function left one: its
    `metadata["answer"]`, or an "answer"/"pred" key of a dict reward. None otherwise."""
    meta = getattr(sample, "metadata", None)
    if isinstance(meta, dict) and answer_or_none(meta.get("answer")) is not None:
        return meta["answer"]
    reward = getattr(sample, "reward", None)
    if isinstance(reward, dict):
        return answer_or_none(reward.get("answer")) or answer_or_none(reward.get("pred"))
    return None


def make_post_process(
    backend: Reweighter, *, method: str = DEFAULT_METHOD, params: dict[str, Any] | None = None
) -> Callable[[Any, Sequence[Any]], tuple[list[float], list[float]]]:
    """A slime reward post-process hook bound to a client (`reweighter.client.connect`)."""

    def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
        raw = [_reward_value(s, args) for s in samples]
        if not samples:
            return raw, []
        kind = advantage_kind(args)
        answers = [_answer(s) for s in samples]
        steps = {s.rollout_id for s in samples if getattr(s, "rollout_id", None) is not None}
        out = reweight_by_key(
            backend,
            [_group_key(i, s) for i, s in enumerate(samples)],
            raw,
            [s.response for s in samples],
            order=[_order(i, s) for i, s in enumerate(samples)],
            method=method,
            params=params,
            advantages=kind,
            answers=answers if any(a is not None for a in answers) else None,
            prompt_keys=[prompt_key(s.prompt) for s in samples],
            step=min(steps) if steps else None,
        )
        return raw, out.advantages if out.advantages is not None else out.rewards

    return post_process_rewards


def options_from_env(env: Mapping[str, str] | None = None) -> ReweighterOptions:
    """The hook's options: REWEIGHTER_* (ReweighterOptions.from_env); the advantages follow
    slime's flags, so REWEIGHTER_ADVANTAGES (and _ADVANTAGE_PARAMS) is refused, naming it."""
    return ReweighterOptions.from_env(env, stack="slime")


@functools.cache
def _default_hook() -> Callable[[Any, Sequence[Any]], tuple[list[float], list[float]]]:
    cfg = options_from_env()
    return make_post_process(cfg.connect(), method=cfg.method, params=dict(cfg.params))


def post_process_rewards(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """The hook slime loads by path; configured from the environment on first use."""
    return _default_hook()(args, samples)
