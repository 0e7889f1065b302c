"""SkyRL (the `skyrl` package, 0.4.x): diversity-aware rewards as a generator-output postprocessor.

SkyRL's trainer (`skyrl.train.trainer.RayPPOTrainer`, and `FullyAsyncRayPPOTrainer` over it)
generates a whole batch, then calls `postprocess_generator_output(generator_output, uids,
metrics_generator_output=None, metrics_uids=None)`, which turns the response-level `rewards`
into per-token rewards before advantages are computed and returns `(generator_output, uids)`.
Every entry's `trajectory_ids[i].instance_id` names its prompt, so groups are known: one
/v1/reweight call per batch, no assembly; a group's members go in
`trajectory_ids[i].repetition_id` order. Plug it in with the mixin:

    from skyrl.train.trainer import RayPPOTrainer
    from reweighter.integrations.skyrl import ReweighterPostprocessMixin

    class ReweightedTrainer(ReweighterPostprocessMixin, RayPPOTrainer):
        reweighter_url = "http://reweighter:8080"     # any ReweighterOptions: reweighter_<name>

or call `reweight_generator_output` from your own trainer subclass or generator.

Metrics: SkyRL's own `reward/*` metrics (avg_raw_reward, avg_pass_at_n, mean_positive_reward)
stay computed by SkyRL from the verifier's raw rewards (the mixin hands SkyRL the raw output as
its `metrics_generator_output`); ours go beside them as `reweighter/raw_reward_mean`,
`reweighter/reward_mean` (what training uses) and `reweighter/mean_similarity`. SkyRL's
zero-variance filter sees the reweighted rewards, as its advantages do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..client import Reweighter
from ..types import DEFAULT_METHOD
from ._stacks import answer_or_none, reweight_by_key
from .options import ReweighterOptions

Decode = Callable[[Sequence[int]], str]


def reweight_generator_output(
    generator_output: Mapping[str, Any],
    backend: Reweighter,
    decode: Decode,
    *,
    method: str = DEFAULT_METHOD,
    params: Mapping[str, Any] | None = None,
    answers: Sequence[str | None] | None = None,
    step: int | None = None,
    quality: Sequence[float] | None = None,
) -> dict[str, Any]:
    """A copy of a SkyRL `GeneratorOutput` whose response-level `rewards` are reweighted.

    `answers` (one per response: its extracted final answer, or None) default to the output's
    `"answers"` entry when a custom generator adds one; the prompt key is the trajectory's
    `instance_id`; `step` is the trainer's global step (the mixin passes it). `quality` (one
    per response: the quality part of its reward, e.g. the verifier's correctness term)
    defaults to the output's `"quality"` entry, likewise: the method then reweights only that
    part and adds the rest back unchanged (docs/methods.md, "Quality apart from the rest").

    Groups are `trajectory_ids[i].instance_id`; the text embedded is `decode(response_ids[i])`.
    In step-wise mode only the last step of each trajectory (`is_last_step`) carries the
    outcome reward, so only those entries are grouped; the other steps keep theirs. The raw
    rewards and the mean group similarity are added to `rollout_metrics`.
    """
    rewards = list(generator_output["rewards"])
    if rewards and isinstance(rewards[0], list | tuple):
        raise ValueError("rewards: token-level rewards cannot be reweighted; give one per response")
    trajectory_ids = generator_output.get("trajectory_ids")
    if trajectory_ids is None or len(trajectory_ids) != len(rewards):
        raise ValueError("trajectory_ids: one TrajectoryID per response is needed to form groups")
    responses = generator_output["response_ids"]
    last = generator_output.get("is_last_step") or [True] * len(rewards)
    picked = [i for i in range(len(rewards)) if last[i]]
    given = answers if answers is not None else generator_output.get("answers")
    if given is not None and len(given) != len(rewards):
        raise ValueError(f"answers: {len(given)} given for {len(rewards)} responses")
    picked_answers = None if given is None else [answer_or_none(given[i]) for i in picked]
    q = quality if quality is not None else generator_output.get("quality")
    if q is not None and len(q) != len(rewards):
        raise ValueError(f"quality: {len(q)} given for {len(rewards)} responses")
    out = reweight_by_key(
        backend,
        [trajectory_ids[i].instance_id for i in picked],
        [float(rewards[i]) for i in picked],
        [decode(responses[i]) for i in picked],
        order=[trajectory_ids[i].repetition_id for i in picked],
        method=method,
        params=params,
        answers=picked_answers,
        prompt_keys=[str(trajectory_ids[i].instance_id) for i in picked],
        step=step,
        quality=None if q is None else [float(q[i]) for i in picked],
    )
    new_rewards: list[float] = [float(r) for r in rewards]
    for i, r in zip(picked, out.rewards, strict=True):
        new_rewards[i] = r
    metrics = dict(generator_output.get("rollout_metrics") or {})
    if picked:
        metrics["reweighter/raw_reward_mean"] = sum(float(rewards[i]) for i in picked) / len(picked)
        metrics["reweighter/reward_mean"] = sum(out.rewards) / len(picked)
        metrics["reweighter/mean_similarity"] = sum(out.mean_similarity) / len(picked)
    return {**generator_output, "rewards": new_rewards, "rollout_metrics": metrics}


class ReweighterPostprocessMixin:
    """Put before RayPPOTrainer (or FullyAsyncRayPPOTrainer) in the bases; reweights, then lets
    SkyRL's own postprocessing (per-token rewards, zero-variance filter, step-wise merging, its
    reward metrics over the raw rewards) run on the result.

    The options are ReweighterOptions' (integrations/options.py), each set as a class attribute
    `reweighter_<option>`: `reweighter_url` (any `reweighter.client.connect` URL),
    `reweighter_api_key`, `reweighter_timeout_s`, `reweighter_long_text` (in process),
    `reweighter_method`, `reweighter_params`; or assign a client to `reweighter_backend`. They
    are checked when the class is defined: a misspelt `reweighter_*` attribute, a bad value, an
    option the backend cannot apply or one SkyRL decides itself (`reweighter_advantages`:
    SkyRL computes its advantages from the reweighted rewards) is refused, naming it."""

    reweighter_backend: Reweighter | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mixin_options(cls)  # a mistake fails where the class is defined

    @property
    def reweighter_options(self) -> ReweighterOptions:
        """The `reweighter_<option>` attributes as they are now (an attribute assigned after
        the class was defined, or on the instance, counts), checked again."""
        return mixin_options(self)

    def postprocess_generator_output(
        self,
        generator_output: Any,
        uids: list[str],
        metrics_generator_output: Any = None,
        metrics_uids: list[str] | None = None,
    ) -> tuple[Any, list[str]]:
        options = self.reweighter_options
        if self.reweighter_backend is None:
            self.reweighter_backend = options.connect()
        tokenizer = self.tokenizer  # type: ignore[attr-defined]  (RayPPOTrainer has one)
        reweighted = reweight_generator_output(
            generator_output,
            self.reweighter_backend,
            lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
            method=options.method,
            params=options.params,
            step=getattr(self, "global_step", None),
        )
        # SkyRL copied rollout_metrics into all_metrics (and dropped them) before this hook:
        # ours go straight there, and the output keeps the rollout_metrics it came with.
        metrics = reweighted.pop("rollout_metrics")
        if "rollout_metrics" in generator_output:
            reweighted["rollout_metrics"] = generator_output["rollout_metrics"]
        ours = {k: v for k, v in metrics.items() if k.startswith(_PREFIX)}
        if metrics_generator_output is None:  # SkyRL's reward/* metrics: over the raw rewards
            metrics_generator_output, metrics_uids = generator_output, uids
        out = super().postprocess_generator_output(  # type: ignore[misc]
            reweighted,
            uids,
            metrics_generator_output=metrics_generator_output,
            metrics_uids=metrics_uids,
        )
        self.all_metrics.update(ours)  # type: ignore[attr-defined]
        return out


_PREFIX = "reweighter/"
_PREFIX_ATTR = "reweighter_"
_OWN = ("reweighter_backend", "reweighter_options")


def mixin_options(obj: Any) -> ReweighterOptions:
    """The options a class (or an instance) sets as `reweighter_<option>` attributes, its
    bases' too, the nearest winning; parsed as ReweighterOptions for SkyRL, errors naming the
    attribute."""
    cls = obj if isinstance(obj, type) else type(obj)
    layers = [vars(k) for k in reversed(cls.__mro__)]
    if obj is not cls:
        layers.append(vars(obj))
    given: dict[str, Any] = {}
    for layer in layers:
        for attr, value in layer.items():
            if not attr.startswith(_PREFIX_ATTR) or attr in _OWN:
                continue
            name = attr.removeprefix(_PREFIX_ATTR)
            if name not in ReweighterOptions.model_fields:
                known = ", ".join(_PREFIX_ATTR + n for n in ReweighterOptions.model_fields)
                raise ValueError(f"{cls.__name__}.{attr}: not a Reweighter option ({known})")
            given[name] = value
    return ReweighterOptions.parse(
        given, lambda k: f"{cls.__name__}.{_PREFIX_ATTR}{k}", stack="skyrl"
    )
