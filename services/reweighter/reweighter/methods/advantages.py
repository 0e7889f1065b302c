"""Group-relative advantage estimators, computed after reweighting.

- "grpo" (DeepSeekMath, arXiv 2402.03300): A_i = (r_i − mean(r)) / (std(r) + 1e-4), with the
  sample std (n − 1 in the denominator), as TRL's GRPOTrainer computes it.
- "dr_grpo" (Dr. GRPO, arXiv 2503.20783): A_i = r_i − mean(r); dividing by the std biases
  learning towards groups whose rewards barely differ.
- "pass_at_k" (Pass@k Training, arXiv 2508.10751): the closed-form advantage of pass@k over
  success/failure, with `advantage_params` k and success_threshold; methods/pass_at_k.py.
- "none": the rewards unchanged.

The list is the catalogue (estimators.py); this module holds the kernels of the simple ones.

A group of one has no sample std; its grpo (and dr_grpo) advantage is 0: one completion carries
no relative signal.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.estimators import estimator_names, get_estimator
from reweighter.methods.params import kernel_params
from reweighter.types import AdvantageKind

STD_EPS = 1e-4


def advantages(
    rewards: torch.Tensor,
    kind: AdvantageKind | str,
    *,
    mask: torch.Tensor | None = None,
    **params: Any,
) -> torch.Tensor:
    """Advantages per item, shaped like `rewards` ([G] or [B, G]); masked items get 0.

    `params` are the estimator's (`k` and `success_threshold` for pass_at_k: see
    methods/pass_at_k.py). Checks its input (a public function): an unknown kind names `kind`,
    a bad parameter its keyword, a `within_group` parameter over a group's size that parameter.
    The engine calls `batched_advantages` instead.
    """
    spec = get_estimator(kind, field="kind")
    p = kernel_params(spec.params_model, **params)
    b = _checks.batch(rewards, mask)
    if spec.within_group is not None:
        smallest = int(b.counts().amin())
        value = getattr(p, spec.within_group)
        if value > smallest:
            raise InvalidInput(
                f"{spec.within_group} = {value} exceeds a group of {smallest} completions",
                field=spec.within_group,
            )
    return spec.apply(b, p)


def batched_advantages(
    b: _checks.Batch, kind: str, params: BaseModel | None = None
) -> torch.Tensor:
    """The estimator `kind` of the catalogue (estimators.py) on a checked (or trusted) Batch;
    trusts `kind`, `params` (its parameter model, checked against every group) and the
    rewards."""
    spec = get_estimator(kind)
    return spec.apply(b, params if params is not None else kernel_params(spec.params_model))


def apply_none(b: _checks.Batch, params: BaseModel) -> torch.Tensor:
    return b.unbatch(b.rewards.clone())


def apply_dr_grpo(b: _checks.Batch, params: BaseModel) -> torch.Tensor:
    return b.unbatch(b.centred())


def apply_grpo(b: _checks.Batch, params: BaseModel) -> torch.Tensor:
    n = b.counts()
    centred = b.centred()
    std = (centred.square().sum(-1) / (n - 1).clamp_min(1.0)).sqrt()
    # n = 1: centred is exactly 0, so the advantage is 0 whatever the std.
    return b.unbatch(centred / (std.unsqueeze(-1) + STD_EPS))


def __getattr__(name: str) -> Any:
    if name == "ADVANTAGE_KINDS":  # the catalogue's names, as they are when asked
        return tuple(estimator_names())
    raise AttributeError(name)
