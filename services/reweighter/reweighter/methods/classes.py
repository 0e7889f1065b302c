"""Answer classes inside a group: which completions count as "the same answer".

Two sources, one result: a [B, G] tensor of class labels (`-1` at masked items) that the
methods read only through *which items share a label*, so the label values themselves never
decide a number (the result is permutation-equivariant).

- From given answers (`answer_labels`): the canonical final answer a reward function extracted,
  one string or None per completion. Equal strings are one class; **a None (no answer
  extracted) is a class of its own**: two completions that both failed to produce an answer
  are not "the same answer".
- From embeddings (`similarity_classes`): completions whose cosine similarity reaches
  `threshold` are joined, and classes are the connected components of that graph (the
  transitive closure, as Darling's union-find over its pairwise classifier). The default
  threshold (`CLASS_THRESHOLD` in params.py) is calibrated in docs/methods.md.

Also the group statistics built on classes: `class_counts` (classes per group) and
`effective_size` (an effective number of distinct completions from the similarity matrix).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reweighter.methods import _checks


def answer_labels(answers: Sequence[str | None]) -> list[int]:
    """Class labels of one group's answers: equal strings share a label, each None is alone.

    Labels are numbered by first appearance; only which items share one matters.
    """
    seen: dict[str, int] = {}
    out: list[int] = []
    for i, a in enumerate(answers):
        if a is None:
            out.append(len(answers) + i)  # never equal to another item's label
        else:
            out.append(seen.setdefault(a, len(seen)))
    return out


def distinct_answers(answers: Sequence[str | None]) -> int:
    """The number of distinct non-null answers of one group."""
    return len({a for a in answers if a is not None})


def similarity_classes(
    sim: torch.Tensor, mask: torch.Tensor | None, threshold: float
) -> torch.Tensor:
    """[B, G, G] cosine similarities -> [B, G] component labels (-1 at masked items).

    Each item's label is the smallest index in its connected component of the graph
    `s_ij >= threshold` (valid items only). Min-label propagation over the graph, one
    elementwise step per round; at most G rounds (it stops when nothing changes, with pointer
    jumping, after O(log G) rounds: 2 or 3 for the usual groups).
    """
    b, g, _ = sim.shape
    adj = sim >= threshold
    if mask is not None:
        adj = adj & mask.unsqueeze(-1) & mask.unsqueeze(-2)
    adj = adj | torch.eye(g, dtype=torch.bool, device=sim.device)  # a masked item: itself only
    # Float labels and an additive penalty: int64 where/amin take a slow path on CPU (10x).
    penalty = (~adj).to(torch.float32) * float(g)
    labels = torch.arange(g, dtype=torch.float32, device=sim.device).expand(b, g)
    for _ in range(g):
        # New label: the least label among the item's neighbours (itself included).
        new = (labels.unsqueeze(-2) + penalty).amin(-1)
        # Pointer jumping: take the label of one's label (an item of the same component with a
        # smaller index), so long chains collapse in O(log G) rounds instead of O(G).
        new = new.gather(-1, new.long())
        if torch.equal(new, labels):
            break
        labels = new
    labels = labels.long()
    if mask is not None:
        labels = labels.masked_fill(~mask, -1)
    return labels


def same_class(labels: torch.Tensor) -> torch.Tensor:
    """[B, G] labels -> [B, G, G] bool: items i and j share a class (masked items share none)."""
    valid = labels >= 0
    return (
        (labels.unsqueeze(-1) == labels.unsqueeze(-2)) & valid.unsqueeze(-1) & valid.unsqueeze(-2)
    )


def class_counts(labels: torch.Tensor) -> torch.Tensor:
    """[B, G] labels -> [B] the number of classes per group.

    An item is its class's representative when no earlier valid item shares its label.
    """
    same = same_class(labels)
    earlier = torch.ones_like(same[0]).tril_(-1)  # j < i
    first = ~(same & earlier).any(-1) & (labels >= 0)
    return first.sum(-1)


def effective_size(sim: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """An effective number of distinct completions per group: [G, G] -> scalar, [B, G, G] -> [B].

        n_eff = n^2 / sum_{i,j} max(0, s_ij)        (s_ii = 1, valid items only)

    that is n divided by the mean row sum of the (floored) similarity matrix, the mean of DRA's
    denominators. n identical completions give 1; n mutually orthogonal ones give n; in between
    it falls as completions grow alike. Negative similarities count as 0 ("not redundant"), so
    n_eff never exceeds n. Chosen over exp(entropy of the eigen-spectrum) (the Vendi score)
    because it has the same two end points, needs no eigen-decomposition (O(G^2) per group) and
    reads the same similarity DRA divides by.
    """
    s = _checks.as_tensor(sim, "similarity")
    squeeze = s.dim() == 2
    if squeeze:
        s = s.unsqueeze(0)
    s = s.clamp_min(0.0)
    s = s.clone()
    s.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    if mask is not None:
        m = mask.unsqueeze(0) if squeeze else mask
        s = s.masked_fill(~(m.unsqueeze(-1) & m.unsqueeze(-2)), 0.0)
        n = m.sum(-1).to(s.dtype)
    else:
        n = torch.full(s.shape[:1], float(s.shape[-1]), dtype=s.dtype, device=s.device)
    out = n * n / s.sum((-2, -1)).clamp_min(torch.finfo(s.dtype).tiny)
    return out[0] if squeeze else out
