"""Cosine similarity inside each group, and the group's mean pairwise similarity (a diversity stat).

Both methods measure redundancy as the cosine similarity `s_ij` of L2-normalised completion
embeddings. Groups never mix: similarities are only ever taken between members of one group.
"""

from __future__ import annotations

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks


def _normalise(e: torch.Tensor, mask: torch.Tensor | None, squeeze: bool) -> torch.Tensor:
    """L2-normalise rows of [B, G, D]; masked rows become 0. Rejects NaN/inf and zero norms."""
    norm = torch.linalg.vector_norm(e, dim=-1, keepdim=True)
    if mask is not None:
        norm = torch.where(mask.unsqueeze(-1), norm, torch.ones((), dtype=e.dtype, device=e.device))
    if not bool(torch.isfinite(norm).all()):
        # A NaN/inf element makes its row's norm non-finite; so can an overflow of finite values.
        bad = ~torch.isfinite(e).all(-1)
        if mask is not None:
            bad &= mask
        if bool(bad.any()):
            b, i = (int(v) for v in bad.nonzero()[0])
            where = f"item {i}" if squeeze else f"group {b}, item {i}"
            raise InvalidInput(f"NaN or inf at {where}", field="embeddings")
        scale = e.abs().amax(-1, keepdim=True).clamp_min(1.0)
        return _normalise(e / scale, mask, squeeze)
    zero = norm.squeeze(-1) == 0
    if bool(zero.any()):
        b, i = (int(v) for v in zero.nonzero()[0])
        where = f"item {i}" if squeeze else f"group {b}, item {i}"
        raise InvalidInput(
            f"zero-norm embedding at {where}: its cosine similarity is undefined",
            field="embeddings",
        )
    out = e / norm
    if mask is not None:
        out = out.masked_fill(~mask.unsqueeze(-1), 0.0)
    return out


def _cosine(e: torch.Tensor, mask: torch.Tensor | None, squeeze: bool) -> torch.Tensor:
    """[B, G, D] -> [B, G, G]; s_ii = 1 exactly, rows and columns of masked items 0."""
    n = _normalise(e, mask, squeeze)
    sim = torch.bmm(n, n.transpose(1, 2)).clamp_(-1.0, 1.0)
    diag = sim.diagonal(dim1=-2, dim2=-1)
    if mask is None:
        diag.fill_(1.0)
    else:
        diag.copy_(mask)
    return sim


def cosine_similarity(embeddings: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Cosine similarity of every pair inside each group: [G, D] -> [G, G], [B, G, D] -> [B, G, G].

    The diagonal is exactly 1; rows and columns of masked items are 0. Half-precision embeddings
    are upcast to float32 first (similarities near 1 are what the methods care about). Raises a
    ValueError for NaN/inf or zero-norm embeddings of valid items, and for empty groups.
    """
    e = _checks.as_tensor(embeddings, "embeddings")
    if e.dim() not in (2, 3):
        raise InvalidInput(
            f"must have shape [G, D] or [B, G, D], got {_checks.shape(e)}", field="embeddings"
        )
    # Validate shape and mask against a dummy group of the same size.
    b = _checks.batch(e.new_zeros(e.shape[:-1], dtype=torch.float32), mask)
    e = _checks.check_pairs(e, b, "embeddings", 0)
    e = e.to(_checks.compute_dtype(e))
    return b.unbatch(_cosine(e, b.mask, b.squeeze))


def mean_pairwise_similarity(sim: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of s_ij over distinct pairs i < j of valid items: [G, G] -> scalar, [B, G, G] -> [B].

    A group of one has no pairs; it reports 1.0 (it is as redundant as it can be: one path).
    """
    s = _checks.as_tensor(sim, "similarity")
    if s.dim() not in (2, 3) or s.shape[-1] != s.shape[-2]:
        raise InvalidInput(
            f"must have shape [G, G] or [B, G, G], got {_checks.shape(s)}", field="similarity"
        )
    b = _checks.batch(s.new_zeros(s.shape[:-1], dtype=torch.float32), mask)
    s = _checks.check_pairs(s, b, "similarity", 1).to(_checks.compute_dtype(s))
    g = s.shape[-1]
    pairs = torch.ones(g, g, dtype=torch.bool, device=s.device).triu_(1)
    if b.mask is None:
        keep = pairs.expand_as(s)
    else:
        keep = pairs & b.mask.unsqueeze(-1) & b.mask.unsqueeze(-2)
    check = torch.where(keep, s, torch.zeros((), dtype=s.dtype, device=s.device))
    if not bool(torch.isfinite(check).all()):
        raise InvalidInput("NaN or inf among the similarities", field="similarity")
    n = keep.sum((-2, -1)).to(s.dtype)
    total = check.sum((-2, -1))
    out = torch.where(n > 0, total / n.clamp_min(1.0), torch.ones_like(total))
    return b.unbatch(out)
