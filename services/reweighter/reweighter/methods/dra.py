"""DRA: Diversity-aware Reward Adjustment (DRA-GRPO, Chen et al., arXiv 2505.09655).

    r~_i = r_i / (sum_j s_ij + eps),   j over the valid members of i's group, s_ii = 1

which is the paper's `R / (1 + SMI_graph_cut)`: a completion that many of its siblings resemble
shares its reward with them; a completion unlike every other keeps it (orthogonal embeddings give
r~_i = r_i / (1 + eps)), and G identical completions each get r / G.

`similarity_floor`: cosine similarities can be negative, and the row sum `sum_j s_ij` with them. A
negative denominator flips the sign of the reward, so a *correct* answer that is unlike its
siblings would be punished. With the default floor 0.0, off-diagonal similarities below 0 count as
0, the denominator is at least 1, and no reward changes sign or grows. `similarity_floor=None`
reproduces the authors' released code exactly (no floor), sign flips included, for
non-negative rewards.

**Penalties are kept as they are** (since issue 49; before, DRA divided every reward):

    r~_i = r_i / (sum_j s_ij + eps)   for r_i > 0,      r~_i = r_i   for r_i <= 0

The paper's rewards are non-negative (accuracy and format), where this is its formula exactly.
Dividing a *negative* reward by the similarity sum would penalise six copies of one wrong answer
each about a sixth as much as a unique wrong answer (under a reward that pays -1 for a wrong
answer, as verl's DAPO math score does): GRPO would be pushed toward the collapsed wrong answer.
Multiplying it instead (the inverse) would make a penalty grow with the group's size, which the
reward's author did not ask for. Kept as it is, a penalty is never smaller for being repeated,
no reward grows in magnitude, and a completion of higher reward with the same similarities never
gets less (Darling's rule, methods/darling.py).

With a request's `quality` (types.Group.quality) the engine runs this on the quality part only
and adds the rest (reward - quality, e.g. a format term) unchanged (MethodSpec.run): a right
answer's quality stays above a wrong answer's 0 whatever their repetition.
"""

from __future__ import annotations

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.params import DraParams, kernel_params
from reweighter.methods.similarity import group_similarities


def _dra(
    b: _checks.Batch,
    sim: torch.Tensor,
    similarity_floor: float | None,
    eps: float,
    *,
    trusted: bool = False,
) -> torch.Tensor:
    """The formula on validated [B, G] rewards and [B, G, G] similarities; trusts its input.

    `trusted`: sim is finite (from `_cosine`, or checked by the engine), so it is not checked
    again. The one check left is on the result: without a floor the denominator can vanish,
    which only the computation can tell.
    """
    s = sim.clamp_min(similarity_floor) if similarity_floor is not None else sim.clone()
    s.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    if b.mask is not None:
        s.masked_fill_(~(b.mask.unsqueeze(-1) & b.mask.unsqueeze(-2)), 0.0)
    if not trusted and not _checks.all_finite(s):
        raise InvalidInput("NaN or inf among the similarities of valid items", field="similarity")
    r = b.rewards.to(s.dtype)
    # A penalty is kept as it is (module docstring): dividing it would shrink a repeated one.
    out = torch.where(r > 0, r / (s.sum(-1) + eps), r)
    if b.mask is not None:
        out = out.masked_fill_(~b.mask, 0.0)
    # With a floor >= 0 every denominator is >= 1: the result is finite by construction.
    if (similarity_floor is None or similarity_floor < 0) and not _checks.all_finite(out):
        bad = ~torch.isfinite(out)
        g, i = (int(v) for v in bad.nonzero()[0])
        where = f"item {i}" if b.squeeze else f"group {g}, item {i}"
        raise InvalidInput(
            f"the DRA denominator sum_j s_ij + eps vanishes at {where}; use a similarity_floor "
            "(the default 0.0 keeps it at least 1)",
            field="similarity_floor",
        )
    return b.unbatch(out)


def apply(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: DraParams
) -> tuple[torch.Tensor, None]:
    """The catalogue's kernel: [B, G] rewards and [B, G, G] similarities the engine checked;
    (new rewards [B, G], None: DRA has no λ)."""
    if sim is None:
        raise InvalidInput("method 'dra' needs the similarity matrix", field="similarity")
    b = _checks.trusted(rewards.to(sim.device), mask)
    s = sim.to(_checks.compute_dtype(sim, b.rewards))
    return _dra(b, s, p.similarity_floor, p.eps, trusted=True), None


def dra(
    rewards: torch.Tensor, embeddings: torch.Tensor | None = None, *,
    sim: torch.Tensor | None = None, mask: torch.Tensor | None = None,
    similarity_floor: float | None = 0.0, eps: float = 1e-6,
) -> torch.Tensor:
    """DRA-reweighted rewards, same shape as `rewards` ([G] or [B, G]); see the module docstring.

    Give `embeddings` ([G, D] or [B, G, D]) or precomputed cosine similarities `sim` ([G, G] or
    [B, G, G]; the diagonal is ignored: s_ii = 1). Each group is reweighted on its own, never
    mixing groups (both papers' released code mixes a process's groups; we do not). Masked
    items are left out of every sum and get 0. Computed on the input's device, in float32
    (float64 if an input is float64).
    """
    p = kernel_params(DraParams, similarity_floor=similarity_floor, eps=eps)
    b, s, given = group_similarities(rewards, embeddings, sim, mask)
    return _dra(b, s, p.similarity_floor, p.eps, trusted=not given)
