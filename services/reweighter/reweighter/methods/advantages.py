"""Group-relative advantage estimators, computed after reweighting.

- "grpo" (DeepSeekMath, arXiv 2402.03300): A_i = (r_i − mean(r)) / (std(r) + 1e-4), with the
  sample std (n − 1 in the denominator), as TRL's GRPOTrainer computes it.
- "dr_grpo" (Dr. GRPO, arXiv 2503.20783): A_i = r_i − mean(r); dividing by the std biases
  learning towards groups whose rewards barely differ.
- "none": the rewards unchanged.

A group of one has no sample std; its grpo (and dr_grpo) advantage is 0: one completion carries
no relative signal.
"""

from __future__ import annotations

from typing import Literal

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks

AdvantageKind = Literal["grpo", "dr_grpo", "none"]
ADVANTAGE_KINDS: tuple[str, ...] = ("grpo", "dr_grpo", "none")
STD_EPS = 1e-4


def advantages(
    rewards: torch.Tensor, kind: str, *, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Advantages per item, shaped like `rewards` ([G] or [B, G]); masked items get 0."""
    if kind not in ADVANTAGE_KINDS:
        raise InvalidInput(
            f"unknown advantage kind {kind!r}; known: {', '.join(ADVANTAGE_KINDS)}", field="kind"
        )
    b = _checks.batch(rewards, mask)
    r = b.rewards
    if kind == "none":
        return b.unbatch(r.clone())
    n = b.counts()
    centred = b.centred()
    if kind == "dr_grpo":
        return b.unbatch(centred)
    std = (centred.square().sum(-1) / (n - 1).clamp_min(1.0)).sqrt()
    # n = 1: centred is exactly 0, so the advantage is 0 whatever the std.
    return b.unbatch(centred / (std.unsqueeze(-1) + STD_EPS))
