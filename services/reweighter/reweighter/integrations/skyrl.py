"""SkyRL (skyrl-train): diversity-aware rewards as a generator-output postprocessor.

SkyRL's trainer generates a whole batch, then calls
`RayPPOTrainer.postprocess_generator_output(generator_output, uids)`, which turns the
response-level `rewards` into per-token rewards before advantages are computed. Every entry's
`trajectory_ids[i].instance_id` names its prompt, so groups are known: one /v1/reweight call
per batch, no assembly. Plug it in with the mixin:

    from skyrl_train.trainer import RayPPOTrainer
    from reweighter.integrations.skyrl import ReweighterPostprocessMixin

    class ReweightedTrainer(ReweighterPostprocessMixin, RayPPOTrainer):
        reweighter_url = "http://reweighter:8080"

or call `reweight_generator_output` from your own trainer subclass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._stacks import Backend, backend_from, reweight_by_key

Decode = Callable[[Sequence[int]], str]


def reweight_generator_output(
    generator_output: Mapping[str, Any],
    backend: Backend,
    decode: Decode,
    *,
    method: str = "dra",
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A copy of a SkyRL `GeneratorOutput` whose response-level `rewards` are reweighted.

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
    out = reweight_by_key(
        backend,
        [trajectory_ids[i].instance_id for i in picked],
        [float(rewards[i]) for i in picked],
        [decode(responses[i]) for i in picked],
        method=method,
        params=params,
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
    """Put before RayPPOTrainer in the bases; reweights, then lets SkyRL's own postprocessing
    (per-token rewards, pass@n metrics) run on the result. Set `reweighter_url` (http:// or
    grpc://), optionally `reweighter_method`, `reweighter_params`, `reweighter_api_key`, or
    assign a client/engine to `reweighter_backend`."""

    reweighter_url: str = "http://127.0.0.1:8080"
    reweighter_method: str = "dra"
    reweighter_params: Mapping[str, Any] = {}
    reweighter_api_key: str | None = None
    reweighter_backend: Backend | None = None

    def postprocess_generator_output(self, generator_output: Any, uids: list[str]) -> Any:
        if self.reweighter_backend is None:
            self.reweighter_backend = backend_from(
                self.reweighter_url, api_key=self.reweighter_api_key
            )
        tokenizer = self.tokenizer  # type: ignore[attr-defined]  (RayPPOTrainer has one)
        reweighted = reweight_generator_output(
            generator_output,
            self.reweighter_backend,
            lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
            method=self.reweighter_method,
            params=self.reweighter_params,
        )
        return super().postprocess_generator_output(reweighted, uids)  # type: ignore[misc]
