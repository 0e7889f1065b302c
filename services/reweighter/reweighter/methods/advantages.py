"""Group-relative advantage estimators, computed after reweighting.

- "grpo" (DeepSeekMath, arXiv 2402.03300): A_i = (r_i − mean(r)) / (std(r) + 1e-4), with the
  sample std (n − 1 in the denominator), as TRL's GRPOTrainer computes it.
- "dr_grpo" (Dr. GRPO, arXiv 2503.20783): A_i = r_i − mean(r); dividing by the std biases
  learning towards groups whose rewards barely differ.
- "pass_at_k" (Pass@k Training, arXiv 2508.10751): the closed-form advantage of pass@k over
  success/failure, with `advantage_params` k and success_threshold; methods/pass_at_k.py.
- "none": the rewards unchanged.

A group of one has no sample std; its grpo (and dr_grpo) advantage is 0: one completion carries
no relative signal.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel

from reweighter.methods import _checks
from reweighter.methods.params import PassAtKParams, kernel_params
from reweighter.methods.pass_at_k import batched_pass_at_k
from reweighter.types import AdvantageKind, parse_name

ADVANTAGE_KINDS: tuple[str, ...] = tuple(k.value for k in AdvantageKind)
STD_EPS = 1e-4


def advantages(
    rewards: torch.Tensor,
    kind: AdvantageKind | str,
    *,
    mask: torch.Tensor | None = None,
    k: int | None = None,
    success_threshold: float = 1.0,
) -> torch.Tensor:
    """Advantages per item, shaped like `rewards` ([G] or [B, G]); masked items get 0.

    `k` and `success_threshold` are pass_at_k's (see methods/pass_at_k.py). Checks its input
    (a public function); the engine calls `batched_advantages` instead.
    """
    kind_ = parse_name(AdvantageKind, kind, "kind", "advantage kind")
    if kind_ == AdvantageKind.PASS_AT_K:
        from reweighter.methods.pass_at_k import pass_at_k

        return pass_at_k(rewards, k, mask=mask, success_threshold=success_threshold)  # type: ignore[arg-type]
    return batched_advantages(_checks.batch(rewards, mask), kind_)


def batched_advantages(
    b: _checks.Batch, kind: AdvantageKind, params: BaseModel | None = None
) -> torch.Tensor:
    """The estimators on a checked (or trusted) Batch; trusts `kind`, `params` (pass_at_k's
    PassAtKParams, k checked against every group) and the rewards."""
    r = b.rewards
    if kind == AdvantageKind.PASS_AT_K:
        p = params if isinstance(params, PassAtKParams) else kernel_params(PassAtKParams)
        return b.unbatch(batched_pass_at_k(b, p.k, p.success_threshold))
    if kind == AdvantageKind.NONE:
        return b.unbatch(r.clone())
    n = b.counts()
    centred = b.centred()
    if kind == AdvantageKind.DR_GRPO:
        return b.unbatch(centred)
    std = (centred.square().sum(-1) / (n - 1).clamp_min(1.0)).sqrt()
    # n = 1: centred is exactly 0, so the advantage is 0 whatever the std.
    return b.unbatch(centred / (std.unsqueeze(-1) + STD_EPS))
