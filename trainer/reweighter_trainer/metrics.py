"""Held-out metrics for the GRPO vs DRA vs MMR experiment: pass@k, distinct correct, similarity.

Pure functions over numbers and embeddings (no model, no I/O) so they can be checked by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np

DISTINCT_THRESHOLD = 0.9
"""Two correct completions are "the same solution" when their embeddings' cosine is >= this."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k).

    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code".) When fewer than k
    samples are wrong, every k-subset holds a correct one and the value is 1.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def mean_pairwise_similarity(embeddings: Sequence[Sequence[float]] | np.ndarray) -> float:
    """Mean cosine similarity over distinct pairs i < j; 1.0 for fewer than two items (as the
    service's GroupStats.mean_similarity defines it)."""
    e = _unit(np.asarray(embeddings, dtype=np.float64))
    n = len(e)
    if n < 2:
        return 1.0
    sims = e @ e.T
    iu = np.triu_indices(n, k=1)
    return float(sims[iu].mean())


def distinct_correct(
    embeddings: Sequence[Sequence[float]] | np.ndarray,
    correct: Sequence[bool],
    threshold: float = DISTINCT_THRESHOLD,
) -> int:
    """Number of distinct correct solutions in one group: embedding clusters of the correct ones.

    Leader clustering in sample order: a correct completion joins the first cluster whose leader
    has cosine >= `threshold` with it, else it leads a new cluster. The answer being equal, what
    distinguishes two correct completions is the path to it, which the text embedding captures;
    near-copies (same steps, other wording) fall in one cluster.
    """
    if len(embeddings) != len(correct):
        raise ValueError(f"{len(embeddings)} embeddings but {len(correct)} correctness flags")
    e = _unit(np.asarray(embeddings, dtype=np.float64)) if len(embeddings) else None
    leaders: list[np.ndarray] = []
    for i, ok in enumerate(correct):
        if not ok:
            continue
        assert e is not None
        if not any(float(e[i] @ lead) >= threshold for lead in leaders):
            leaders.append(e[i])
    return len(leaders)


def steps_to_target(curve: Sequence[float], target: float, window: int = 3) -> int | None:
    """First step (1-based) whose trailing mean over `window` steps reaches `target`, else None.

    The trailing mean keeps one lucky batch from counting as "reached".
    """
    for i in range(len(curve)):
        lo = max(0, i - window + 1)
        if i + 1 >= min(window, len(curve)) and np.mean(curve[lo : i + 1]) >= target:
            return i + 1
    return None
