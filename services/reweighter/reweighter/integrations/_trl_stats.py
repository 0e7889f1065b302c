"""What the TRL reward function reports: cumulative timings, each batch's statistics, and the
metrics it logs through TRL's `log_metric` hook."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..types import Group, ReweightResult

LOGGED = ("mean_similarity", "lambda", "frac_zero_spread", "frac_zero_spread_base", "base_reward",
          "reward")  # fmt: skip
"""The statistics logged as reweighter/<name>, averaged per logging step next to TRL's own."""


@dataclass
class Timings:
    """Cumulative seconds, so a run can report the share of its wall time spent reweighting."""

    base_s: float = 0.0
    """In the base reward functions (local slice)."""
    reweight_s: float = 0.0
    """Gather + backend call + broadcast: everything reweighting adds to a step."""
    backend_s: float = 0.0
    """The backend call alone (main process)."""
    calls: int = 0
    """Backend calls (one per training step and reward evaluation)."""
    groups: int = 0
    completions: int = 0
    """Groups and completions reweighted, over all calls."""

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def log(log_metric: Callable[[str, float], None] | None, stats: dict, secs: float) -> None:
    """Through TRL's `log_metric` hook: averaged per logging step next to `reward`, `kl`."""
    if log_metric is None:
        return
    for name in LOGGED:
        if stats.get(name) is not None:
            log_metric(f"reweighter/{name}", float(stats[name]))
    log_metric("reweighter/seconds", secs)


def _spread(values: Sequence[float]) -> float:
    return max(values) - min(values)


def batch_stats(groups: list[Group], result: ReweightResult) -> dict[str, Any]:
    n = len(groups)
    lams = [g.stats.lambda_ for g in result.groups if g.stats.lambda_ is not None]
    rewards = [v for g in result.groups for v in g.rewards]
    base = [v for g in groups for v in g.rewards]
    return {
        "mean_similarity": sum(g.stats.mean_similarity for g in result.groups) / n,
        "lambda": sum(lams) / len(lams) if lams else None,
        # Groups whose rewards are all equal give GRPO no signal; reweighting can only help when
        # there is spread to reshape, so both shares are worth watching.
        "frac_zero_spread": sum(_spread(g.rewards) <= 1e-12 for g in result.groups) / n,
        "frac_zero_spread_base": sum(_spread(g.rewards) <= 1e-12 for g in groups) / n,
        "base_reward": sum(base) / len(base),
        "reward": sum(rewards) / len(rewards),
        "groups": [g.id for g in groups],
    }
