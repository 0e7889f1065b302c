"""The built-in methods' engine kernels: whole batches of groups in, trusted input.

The catalogue (`catalog.py`) points at these by path. Each is `apply(rewards [B, G], sim
[B, G, G] | None, mask [B, G] | None, params)` -> (new rewards [B, G], λ per group [B] or None).
The engine checked everything (finite rewards, non-empty groups, finite similarities from
`cosine_similarity`, params parsed by the method's model), so nothing is checked twice.
"""

from __future__ import annotations

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.dra import _dra
from reweighter.methods.mmr import _mmr
from reweighter.methods.params import DraParams, MmrParams, NoneParams


def _need_sim(name: str, sim: torch.Tensor | None) -> torch.Tensor:
    if sim is None:
        raise InvalidInput(f"method {name!r} needs the similarity matrix", field="similarity")
    return sim


def apply_dra(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: DraParams
) -> tuple[torch.Tensor, None]:
    s = _need_sim("dra", sim)
    b = _checks.trusted(rewards.to(s.device), mask)
    s = s.to(_checks.compute_dtype(s, b.rewards))
    return _dra(b, s, p.similarity_floor, p.eps, trusted=True), None


def apply_mmr(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: MmrParams
) -> tuple[torch.Tensor, torch.Tensor]:
    s = _need_sim("mmr", sim)
    b = _checks.trusted(rewards.to(s.device), mask)
    s = s.to(_checks.compute_dtype(s, b.rewards))
    if b.mask is not None:
        s = s.masked_fill(~(b.mask.unsqueeze(-1) & b.mask.unsqueeze(-2)), 0.0)
    return _mmr(b, s, p.fixed_lambda, p.equal_rewards)


def apply_none(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: NoneParams
) -> tuple[torch.Tensor, None]:
    b = _checks.trusted(rewards, mask)
    return b.unbatch(b.rewards.clone()), None
