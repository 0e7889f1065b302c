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


# --- the pre-registered decision (EXPERIMENTS.md) --------------------------------------------

WINDOW = 10
"""Training accuracy is judged on trailing 10-step means (80 completions): one step's 8 are
too few."""
GROUP = 8
"""Completions per step (one prompt's group)."""
TARGET_SE = 1.0
"""The target is GRPO's peak trailing mean less this many standard errors of a window mean
(sqrt(p(1-p) / (WINDOW * GROUP)), 0.056 at p = 0.5). The peak itself is the maximum of ~30 noisy
window means: once GRPO plateaus, the step it is first reached is set by noise, for either arm
(simulated in decision.operating_characteristics; 0 gives the literal peak)."""
MIN_GAIN = 0.10
"""A seed informs the comparison only if GRPO learned on it: its peak trailing mean is at least
this far above its first full window."""
CLAIM = 0.80
"""Confirmed needs the median ratio at or below this (the paper: 0.52; simulated medians under
a true 2x speed-up 0.64-0.73, under no effect 0.97-1.0)."""
REFUTE = 0.95
"""Refuted needs the median ratio at or above this."""

RULE = (
    "Per seed s: target = GRPO's peak trailing-10-step training accuracy less one standard "
    "error of a 10-step mean (sqrt(p(1-p)/80)); S_grpo = first step GRPO's trailing-10 mean "
    "reaches the target, S_mmr = first step MMR's does (never within the budget: ratio +inf); "
    "ratio_s = S_mmr / S_grpo. A seed is informative when GRPO's peak is >= 0.10 above its "
    "first full window (steps 1-10). Fewer than 5 informative seeds: inconclusive. Otherwise: "
    "confirmed if the median ratio <= 0.80 and ratio < 1 on all informative seeds but at most "
    "one; refuted if the median ratio >= 0.95; else inconclusive. Secondary metrics (paired "
    "held-out sample accuracy, pass@8, distinct correct answers per prompt) are reported, not "
    "voted."
)


def trailing(curve: Sequence[float], window: int = WINDOW) -> list[float]:
    """Trailing means over full windows: entry k is the mean of steps k+1 .. k+window."""
    c = np.asarray(curve, dtype=np.float64)
    if len(c) < window:
        return []
    sums = np.convolve(c, np.ones(window), mode="valid")
    return (sums / window).tolist()


def first_step_reaching(curve: Sequence[float], level: float, window: int = WINDOW) -> int | None:
    """The first step (1-based, >= window) whose trailing mean reaches `level`, else None."""
    for k, v in enumerate(trailing(curve, window)):
        if v >= level - 1e-12:
            return k + window
    return None


def seed_ratio(grpo: Sequence[float], mmr: Sequence[float], window: int = WINDOW,
               min_gain: float = MIN_GAIN, target_se: float = TARGET_SE,
               group: int = GROUP) -> dict:
    """One seed's primary metric from the two arms' per-step training accuracy."""
    tg = trailing(grpo, window)
    if not tg or len(trailing(mmr, window)) == 0:
        return {"informative": False, "reason": f"fewer than {window} steps", "ratio": None}
    peak = max(tg)
    target = peak - target_se * float(np.sqrt(peak * (1 - peak) / (window * group)))
    s_grpo = first_step_reaching(grpo, target, window)
    s_mmr = first_step_reaching(mmr, target, window)
    gain = peak - tg[0]
    return {
        "peak": peak,
        "target": target,
        "grpo_gain": gain,
        "informative": gain >= min_gain - 1e-12,
        "steps_grpo": s_grpo,
        "steps_mmr": s_mmr,
        "ratio": (s_mmr / s_grpo) if s_mmr is not None and s_grpo else float("inf"),
    }


def decide(per_seed: dict[int, dict], claim: float = CLAIM, refute: float = REFUTE,
           min_seeds: int = 5) -> str:
    """The verdict of RULE over `seed_ratio` results: confirmed, refuted or inconclusive."""
    ratios = [r["ratio"] for r in per_seed.values() if r.get("informative")]
    if len(ratios) < min_seeds:
        return "inconclusive"
    median = float(np.median(ratios))
    if median <= claim and sum(r >= 1 for r in ratios) <= 1:
        return "confirmed"
    if median >= refute:
        return "refuted"
    return "inconclusive"


def paired(a: Sequence[float], b: Sequence[float]) -> dict:
    """Paired differences b - a (per seed): mean, wins/losses/ties and a two-sided sign test."""
    d = [y - x for x, y in zip(a, b, strict=True)]
    wins, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
    n, k = wins + losses, min(wins, losses)
    p = min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n) if n else 1.0
    return {"diffs": d, "mean": float(np.mean(d)) if d else None, "wins": wins,
            "losses": losses, "ties": len(d) - n, "sign_test_p": p}
