"""Cosine similarity inside each group, and the group's mean pairwise similarity (a diversity stat).

Both methods measure redundancy as the cosine similarity `s_ij` of L2-normalised completion
embeddings. Groups never mix: similarities are only ever taken between members of one group.
"""

from __future__ import annotations

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks


def _gram_slow(e: torch.Tensor, mask: torch.Tensor | None, squeeze: bool) -> torch.Tensor:
    """The rare path: find a NaN/inf or zero vector, or rescale tiny or huge ones, then Gram."""
    if mask is not None:
        e = e.masked_fill(~mask.unsqueeze(-1), 0.0)  # padding may hold anything
    bad = ~torch.isfinite(e).all(-1)
    if bool(bad.any()):
        raise InvalidInput(f"NaN or inf at {_checks.where(bad, squeeze)}", field="embeddings")
    scale = e.abs().amax(-1, keepdim=True)
    zero = scale.squeeze(-1) == 0
    if mask is not None:
        zero &= mask
    if bool(zero.any()):
        raise InvalidInput(
            f"zero-norm embedding at {_checks.where(zero, squeeze)}: its cosine similarity is "
            "undefined",
            field="embeddings",
        )
    e = e / scale.clamp_min(torch.finfo(e.dtype).tiny)  # every valid row now has max |x| = 1
    return torch.bmm(e, e.transpose(1, 2))


def _cosine(e: torch.Tensor, mask: torch.Tensor | None, squeeze: bool) -> torch.Tensor:
    """[B, G, D] -> [B, G, G]; s_ii = 1 exactly, rows and columns of masked items 0.

    One Gram matrix, normalised by its own diagonal: no normalised copy of the embeddings is
    ever written (at 1024 x 16 x 384 that copy cost more than the matmul). The checks read only
    the diagonal; bad vectors (NaN/inf, zero, norms near float limits) take the slow path.
    """
    if e.numel() == 0:
        return e.new_zeros(e.shape[0], e.shape[1], e.shape[1])
    lo = torch.finfo(e.dtype).tiny / torch.finfo(e.dtype).eps  # below: denormal squared norms
    for attempt in range(2):
        g = torch.bmm(e, e.transpose(1, 2)) if attempt == 0 else _gram_slow(e, mask, squeeze)
        sq = g.diagonal(dim1=-2, dim2=-1)
        if mask is not None:
            sq = sq.masked_fill(~mask, 1.0)
        if not (_checks.all_finite(sq) and bool(sq.amin() >= lo)):
            continue
        inv = sq.rsqrt()
        sim = g.mul_(inv.unsqueeze(-1)).mul_(inv.unsqueeze(-2)).clamp_(-1.0, 1.0)
        sim.diagonal(dim1=-2, dim2=-1).fill_(1.0)
        if mask is not None:
            sim.masked_fill_(~(mask.unsqueeze(-1) & mask.unsqueeze(-2)), 0.0)
        if _checks.all_finite(sim):  # NaN padding can only reach its own row and column
            return sim
    raise AssertionError("unreachable: the slow path rescales every valid vector")


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
    if not _checks.all_finite(torch.where(_pairs(s, b.mask), s, torch.zeros((), dtype=s.dtype))):
        raise InvalidInput("NaN or inf among the similarities", field="similarity")
    return b.unbatch(batched_mean_similarity(s, b.mask))


def batched_mean_similarity(s: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """[B, G, G] -> [B] on trusted input (the engine's path); see mean_pairwise_similarity."""
    keep = _pairs(s, mask)
    total = torch.where(keep, s, torch.zeros((), dtype=s.dtype, device=s.device)).sum((-2, -1))
    n = keep.sum((-2, -1)).to(s.dtype)
    return torch.where(n > 0, total / n.clamp_min(1.0), torch.ones_like(total))


def _pairs(s: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Which entries of [B, G, G] are distinct pairs i < j of valid items."""
    g = s.shape[-1]
    pairs = torch.ones(g, g, dtype=torch.bool, device=s.device).triu_(1)
    if mask is None:
        return pairs.expand_as(s)
    return pairs & mask.unsqueeze(-1) & mask.unsqueeze(-2)


def batched_cosine(embeddings: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """[B, G, D] -> [B, G, G] on trusted input (the engine checked every vector: finite,
    non-zero); see cosine_similarity."""
    return _cosine(embeddings, mask, False)


def group_similarities(
    rewards: object, embeddings: object, sim: object, mask: object
) -> tuple[_checks.Batch, torch.Tensor, bool]:
    """A public method's input, checked: rewards (+ mask) as a Batch and the groups' [B, G, G]
    similarities, from `embeddings` ([G, D] / [B, G, D]: cosine, finite by construction) or
    given as `sim` ([G, G] / [B, G, G]); exactly one of the two. The flag: whether they were
    given (then the method checks what it reads of them)."""
    if (embeddings is None) == (sim is None):
        both = ", not both" if sim is not None else ""
        raise InvalidInput(f"give either embeddings or sim{both}", field="embeddings")
    if embeddings is not None:
        b, e = _checks.prepare(embeddings, rewards, mask, "embeddings", 0)
        return b, _cosine(e, b.mask, b.squeeze), False
    b, s = _checks.prepare(sim, rewards, mask, "similarity", 1)
    return b, s, True
