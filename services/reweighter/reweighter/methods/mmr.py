"""MMR: Maximal Marginal Relevance reweighting (MMR-GRPO, arXiv 2601.09085).

Greedy selection inside each group, as in MMR retrieval (Carbonell & Goldstein, 1998):

1. the item with the highest reward is selected first and keeps its raw reward;
2. then, G - 1 times, each unselected item i scores

       score_i = λ·r_i − (1 − λ)·max(0, max_{j selected} s_ij)

   the best score is selected and that score becomes its new reward.

λ trades reward against novelty; `lam="adaptive"` sets λ = sigmoid(std(r)) per group
(population std), which always lies in [0.5, 1) (where sigmoid rounds to 1.0 it is kept just
below 1).

Position never decides (the result is permutation-equivariant). Ties in the greedy order are
broken by content: among the items whose score is within `TIE_TOL` of the best, the one least
similar to its whole group (smallest sum of its similarities to the others) goes first, then the
smallest sum of squared similarities, then the higher reward (λ = 0 scores only novelty: two
items with the same similarities and different rewards tie, and the higher reward goes first,
so it never gets less). Items that agree on all of that and on the reward (copies of one
completion, in practice) cannot be told apart by anything the method sees: they share the
values their places in the order got, each the mean. The authors' code takes the lowest
index instead, which with tied rewards hands an arbitrary member the unpenalised first place.

`equal_rewards`: a group whose rewards all agree (exactly) carries no reward signal. "keep"
(default) leaves it as it is, which is λ = 1: every reward unchanged, so GRPO's advantages are 0
as for plain GRPO. "diversify" is the paper's behaviour: λ as configured (adaptive: 0.5), and
the novelty term alone spreads the group's rewards.

**A penalty is not shrunk by λ** (since issue 49; before, every reward was multiplied by λ):

    score_i = λ·r_i − (1 − λ)·red_i   for r_i >= 0,    score_i = r_i − (1 − λ)·red_i   for r_i < 0

with red_i = max(0, max_{j selected} s_ij). The paper's rewards are non-negative (correctness),
where this is its formula exactly. With λ·r_i a unique wrong answer paying -1 would keep only
λ of its penalty (the first pick, which keeps its raw reward, all of it): under
`equal_rewards="diversify"` a unique penalty picked first then weighed more than its repeated
copies' mean. Without λ on a penalty, the first pick's raw reward is its score, repetition only
adds the novelty cost (a repeated penalty is never smaller than a unique one), and since the
score is increasing in r_i, a completion of higher reward with the same similarities is picked
no later and never gets less (scores only fall as picks are made).

With a request's `quality` (types.Group.quality) the engine runs this on the quality part only
and adds the rest (reward - quality, e.g. a format term) unchanged (MethodSpec.run).
"""

from __future__ import annotations

from typing import Literal

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.params import MmrParams, kernel_params
from reweighter.methods.similarity import group_similarities

Lambda = float | Literal["adaptive"]
EqualRewards = Literal["keep", "diversify"]

TIE_TOL = 1e-5
"""Scores and similarity sums closer than this (relative above 1) are ties: float noise (the
order of a sum changes with the members' order) never decides who goes first."""


def _population_std(b: _checks.Batch) -> torch.Tensor:
    return (b.centred().square().sum(-1) / b.counts()).sqrt()


def _near_min(key: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    """The candidates whose key is within TIE_TOL (relative above 1) of the candidates' least."""
    k = key.masked_fill(~cand, torch.inf)
    low = k.amin(-1, keepdim=True)
    return cand & (k <= low + TIE_TOL * (1.0 + low.abs()))


def _mmr(
    b: _checks.Batch, sim: torch.Tensor, lam: float | None, equal_rewards: str = "keep"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy MMR on validated [B, G] rewards and finite [B, G, G] similarities; trusts them.

    `lam` is a float in [0, 1], or None for adaptive (`MmrParams.fixed_lambda`);
    `equal_rewards` is MmrParams.equal_rewards. Masked rows and columns of `sim` are 0.

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
    valid = b.mask if b.mask is not None else torch.ones_like(r, dtype=torch.bool)
    if equal_rewards == "keep":
        hi = r.masked_fill(~valid, -torch.inf).amax(-1)
        lo = r.masked_fill(~valid, torch.inf).amin(-1)
        lam_b = torch.where(hi == lo, torch.ones_like(lam_b), lam_b)  # λ = 1: r unchanged

    # The content keys of the tie rule: an item's similarity to the rest of its group.
    diag = sim.diagonal(dim1=-2, dim2=-1)
    keys = (sim.sum(-1) - diag, (sim * sim).sum(-1) - diag * diag)  # off-diagonal sums
    # Score ties: TIE_TOL, plus the rounding of λ·r for large rewards.
    tol = TIE_TOL + 16 * torch.finfo(r.dtype).eps * r.abs().amax(-1, keepdim=True)

    def pick(score: torch.Tensor) -> torch.Tensor:
        cand = score >= score.amax(-1, keepdim=True) - tol
        if int(cand.sum()) > cand.shape[0]:  # most steps have one best item a group: no keys
            for key in keys:
                cand = _near_min(key, cand)
            cand = _near_min(-r, cand)  # then the higher reward (in practice: at λ = 0)
        # Left: items equal in reward and keys (copies); their values are averaged below, so
        # which of them goes first does not change the answer.
        return cand.to(torch.uint8).argmax(-1, keepdim=True)

    # base_i = λ·r_i (r_i for a penalty: module docstring) while item i may still be picked,
    # -inf once selected or when masked.
    base = torch.where(r >= 0, lam_b.unsqueeze(-1) * r, r)
    base.masked_fill_(~valid, -torch.inf)
    cost = (1.0 - lam_b).unsqueeze(-1)
    rows = torch.arange(bsz, device=r.device) * g  # row offsets into sim viewed as [B*G, G]
    flat_sim = sim.reshape(bsz * g, g)

    first = pick(r.masked_fill(~valid, -torch.inf))
    picks = [first]
    values = [r.gather(-1, first)]  # the first pick keeps its raw reward
    base.scatter_(-1, first, -torch.inf)
    # max(0, max_{j selected} s_ij), kept up to date as items are selected.
    redundancy = flat_sim.index_select(0, rows + first.squeeze(-1)).clamp_min_(0.0)
    for _ in range(g - 1):
        score = torch.addcmul(base, cost, redundancy, value=-1.0)
        p = pick(score)
        picks.append(p)
        values.append(score.gather(-1, p))
        base.scatter_(-1, p, -torch.inf)
        torch.maximum(redundancy, flat_sim.index_select(0, rows + p.squeeze(-1)), out=redundancy)

    # A ragged group runs out of items early: its later "picks" score -inf and land on an
    # arbitrary index; they add 0, so scatter_add leaves the real values intact.
    vals = torch.cat(values, -1)
    vals = vals.masked_fill_(vals == -torch.inf, 0.0)
    out = torch.zeros_like(r).scatter_add_(-1, torch.cat(picks, -1), vals)
    return b.unbatch(_share_among_copies(out, r, keys, valid)), b.unbatch(lam_b)


def _share_among_copies(
    out: torch.Tensor, r: torch.Tensor, keys: tuple[torch.Tensor, ...], valid: torch.Tensor
) -> torch.Tensor:
    """Each item gets the mean value of the items indistinguishable from it (same reward, keys
    within TIE_TOL): copies of one completion, whose order nothing in the input can decide."""
    # Cheap screen: copies are neighbours once a group's first key is sorted.
    k0 = keys[0].masked_fill(~valid, torch.inf)
    srt = k0.sort(-1).values
    gaps = srt[:, 1:] - srt[:, :-1]
    near = (gaps <= TIE_TOL * (1.0 + srt[:, 1:].abs())).any(-1)
    if not bool(near.any()):
        return out
    idx = near.nonzero().squeeze(-1)  # only the groups that may hold copies
    rs, vs, os_ = r[idx], valid[idx], out[idx]
    same = (rs.unsqueeze(-1) == rs.unsqueeze(-2)) & vs.unsqueeze(-1) & vs.unsqueeze(-2)
    for key in keys:
        k = key[idx].masked_fill(~vs, 0.0)
        gap = (k.unsqueeze(-1) - k.unsqueeze(-2)).abs()
        same &= gap <= TIE_TOL * (1.0 + k.abs().unsqueeze(-1).maximum(k.abs().unsqueeze(-2)))
    n = same.sum(-1).clamp_min(1).to(out.dtype)
    shared = (same.to(out.dtype) @ os_.unsqueeze(-1)).squeeze(-1) / n
    shared = torch.where(vs, shared, torch.zeros((), dtype=out.dtype, device=out.device))
    return out.index_copy(0, idx, shared)


def apply(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: MmrParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """The catalogue's kernel: [B, G] rewards and [B, G, G] similarities the engine checked;
    (new rewards [B, G], λ per group [B])."""
    if sim is None:
        raise InvalidInput("method 'mmr' needs the similarity matrix", field="similarity")
    b = _checks.trusted(rewards.to(sim.device), mask)
    s = sim.to(_checks.compute_dtype(sim, b.rewards))
    if b.mask is not None:
        s = s.masked_fill(~(b.mask.unsqueeze(-1) & b.mask.unsqueeze(-2)), 0.0)
    return _mmr(b, s, p.fixed_lambda, p.equal_rewards)


def mmr(
    rewards: torch.Tensor, embeddings: torch.Tensor | None = None, *,
    sim: torch.Tensor | None = None, mask: torch.Tensor | None = None,
    lam: Lambda = "adaptive", equal_rewards: EqualRewards = "keep",
) -> tuple[torch.Tensor, torch.Tensor]:
    """MMR-reweighted rewards and the λ used per group; see the module docstring.

    Give `embeddings` ([G, D] or [B, G, D]) or precomputed cosine similarities `sim` ([G, G] or
    [B, G, G]). Each group is reweighted on its own, never mixing groups. Returns (reweighted
    rewards shaped like `rewards`, λ per group: [B], or a 0-d tensor for one group; 1 for a
    group left as it is). Masked items are never selected and get 0.
    """
    p = kernel_params(MmrParams, lam=lam, equal_rewards=equal_rewards)
    b, s, given = group_similarities(rewards, embeddings, sim, mask)
    if given:
        if b.mask is not None:
            s = s.masked_fill(~(b.mask.unsqueeze(-1) & b.mask.unsqueeze(-2)), 0.0)
        if not _checks.all_finite(s):
            raise InvalidInput(
                "NaN or inf among the similarities of valid items", field="similarity"
            )
    return _mmr(b, s, p.fixed_lambda, p.equal_rewards)
