"""MMR: Maximal Marginal Relevance reweighting (MMR-GRPO, arXiv 2601.09085).

Greedy selection inside each group, as in MMR retrieval (Carbonell & Goldstein, 1998):

1. the item with the highest reward is selected first and keeps its raw reward;
2. then, G - 1 times, each unselected item i scores

       score_i = λ·r_i − (1 − λ)·max(0, max_{j selected} s_ij)

   the best score is selected and that score becomes its new reward.

Ties go to the lowest index at every step. λ trades reward against novelty; `lam="adaptive"`
sets λ = sigmoid(std(r)) per group (population std): a group whose rewards all agree
(std 0, λ = 0.5) leans on diversity, a group with a clear signal leans on the reward. Adaptive λ
always lies in [0.5, 1): where sigmoid rounds to 1.0 in floating point it is kept just below 1.
"""

from __future__ import annotations

from typing import Literal

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.params import MmrParams, kernel_params
from reweighter.methods.similarity import _cosine

Lambda = float | Literal["adaptive"]


def _lambda(lam: object) -> float | None:
    """The public functions' `lam`, validated by MmrParams: None for "adaptive"."""
    p = kernel_params(MmrParams, lam=lam)
    return None if p.lam == "adaptive" else float(p.lam)


def _population_std(b: _checks.Batch) -> torch.Tensor:
    return (b.centred().square().sum(-1) / b.counts()).sqrt()


def _mmr(
    b: _checks.Batch, sim: torch.Tensor, lam: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy MMR on validated [B, G] rewards and finite [B, G, G] similarities; trusts them.

    `lam` is a float in [0, 1], or None for adaptive.

    Vectorised over groups; the only loop is over the G - 1 selection steps, each a handful of
    [B, G] kernels.
    """
    r = b.rewards.to(sim.dtype)
    bsz, g = r.shape
    if lam is None:
        lam_b = torch.sigmoid(_population_std(_checks.Batch(r, b.mask, b.squeeze)))
        # sigmoid rounds to 1.0 once std > ~17 in float32; keep the novelty term alive.
        lam_b = lam_b.clamp_max(1.0 - torch.finfo(r.dtype).eps / 2)
    else:
        lam_b = r.new_full((bsz,), lam)

    # base_i = λ·r_i while item i may still be picked, -inf once selected or when masked.
    base = lam_b.unsqueeze(-1) * r
    if b.mask is not None:
        base.masked_fill_(~b.mask, -torch.inf)
    cost = (1.0 - lam_b).unsqueeze(-1)
    rows = torch.arange(bsz, device=r.device) * g  # row offsets into sim viewed as [B*G, G]
    flat_sim = sim.reshape(bsz * g, g)

    first = (r if b.mask is None else r.masked_fill(~b.mask, -torch.inf)).argmax(-1, keepdim=True)
    picks = [first]
    values = [r.gather(-1, first)]  # the first pick keeps its raw reward
    base.scatter_(-1, first, -torch.inf)
    # max(0, max_{j selected} s_ij), kept up to date as items are selected.
    redundancy = flat_sim.index_select(0, rows + first.squeeze(-1)).clamp_min_(0.0)
    for _ in range(g - 1):
        score = torch.addcmul(base, cost, redundancy, value=-1.0)
        pick = score.argmax(-1, keepdim=True)  # documented: the first index on ties
        picks.append(pick)
        values.append(score.gather(-1, pick))
        base.scatter_(-1, pick, -torch.inf)
        torch.maximum(redundancy, flat_sim.index_select(0, rows + pick.squeeze(-1)), out=redundancy)

    # A ragged group runs out of items early: its later "picks" score -inf and land on an
    # arbitrary index; they add 0, so scatter_add leaves the real values intact.
    vals = torch.cat(values, -1)
    if b.mask is not None:
        vals = vals.masked_fill_(vals == -torch.inf, 0.0)
    out = torch.zeros_like(r).scatter_add_(-1, torch.cat(picks, -1), vals)
    return b.unbatch(out), b.unbatch(lam_b)


def mmr_from_similarity(
    rewards: torch.Tensor, sim: torch.Tensor, *, mask: torch.Tensor | None = None,
    lam: Lambda = "adaptive",
) -> tuple[torch.Tensor, torch.Tensor]:
    """MMR on precomputed cosine similarities ([G, G] or [B, G, G]); see the module docstring.

    Returns (reweighted rewards shaped like `rewards`, λ per group: [B], or a 0-d tensor for one
    group). Masked items are never selected and get 0.
    """
    lam_f = _lambda(lam)
    b, s = _checks.prepare(sim, rewards, mask, "similarity", 1)
    if b.mask is not None:
        s = s.masked_fill(~(b.mask.unsqueeze(-1) & b.mask.unsqueeze(-2)), 0.0)
    if not _checks.all_finite(s):
        raise InvalidInput("NaN or inf among the similarities of valid items", field="similarity")
    return _mmr(b, s, lam_f)


def mmr(
    rewards: torch.Tensor, embeddings: torch.Tensor, *, mask: torch.Tensor | None = None,
    lam: Lambda = "adaptive",
) -> tuple[torch.Tensor, torch.Tensor]:
    """MMR-reweighted rewards and the λ used per group; see the module docstring.

    `embeddings` is [G, D] or [B, G, D]; each group is reweighted on its own, never mixing groups.
    """
    lam_f = _lambda(lam)
    b, e = _checks.prepare(embeddings, rewards, mask, "embeddings", 0)
    return _mmr(b, _cosine(e, b.mask, b.squeeze), lam_f)
