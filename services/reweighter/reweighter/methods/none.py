"""The method "none": the rewards unchanged (plain GRPO), as a catalogue kernel like the others
(the statistics of its groups are still computed)."""

from __future__ import annotations

import torch

from reweighter.methods import _checks
from reweighter.methods.params import NoneParams


def apply(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: NoneParams
) -> tuple[torch.Tensor, None]:
    """The catalogue's kernel: the [B, G] rewards as they are (0 at masked items)."""
    b = _checks.trusted(rewards, mask)
    return b.rewards.clone(), None
