"""The experiment's pre-registered decision (EXPERIMENTS.md) and the offline DRA check.

`decision(runs)` pairs GRPO and MMR runs by seed and applies metrics.RULE; `dra_offline`
recomputes DRA's advantages on the logged GRPO groups through a live service. Both are plain
functions over results.json entries and group logs, so they run on synthetic logs in tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .metrics import CLAIM, MIN_GAIN, RULE, WINDOW, decide, paired, seed_ratio

SECONDARY = ("sample_accuracy", "pass_at_k", "distinct_correct")
DRA_SAME = 0.05
"""Median |advantage change| below this on the logged GRPO groups: DRA is GRPO at this scale."""


def decision(runs: list[dict[str, Any]], base: str = "grpo", arm: str = "mmr") -> dict[str, Any]:
    """{"verdict", "rule", "per_seed", "secondary"} from the runs of `base` and `arm`, paired by
    seed on their per-step training accuracy (`accuracy_curve`)."""
    by = {(r["method"], r["seed"]): r for r in runs}
    seeds = sorted(s for (m, s) in by if m == base and (arm, s) in by)
    per_seed = {}
    for s in seeds:
        res = seed_ratio(by[(base, s)].get("accuracy_curve", []),
                         by[(arm, s)].get("accuracy_curve", []))
        per_seed[s] = {k: (None if v == float("inf") else v) for k, v in res.items()}
        per_seed[s]["mmr_never_reached"] = res.get("ratio") == float("inf")
    verdict = decide({s: seed_ratio(by[(base, s)].get("accuracy_curve", []),
                                    by[(arm, s)].get("accuracy_curve", [])) for s in seeds})
    secondary = {
        key: paired([by[(base, s)][key] for s in seeds], [by[(arm, s)][key] for s in seeds])
        for key in SECONDARY
        if all(key in by[(m, s)] for s in seeds for m in (base, arm))
    }
    return {
        "verdict": verdict,
        "rule": RULE,
        "constants": {"window": WINDOW, "min_gain": MIN_GAIN, "claim": CLAIM, "min_seeds": 5},
        "arms": [base, arm],
        "per_seed": {str(s): v for s, v in per_seed.items()},
        "informative_seeds": sum(1 for v in per_seed.values() if v.get("informative")),
        "secondary": secondary,
    }


def read_groups(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def dra_offline(groups: Iterable[dict[str, Any]], reweight) -> dict[str, Any]:
    """DRA's advantages against GRPO's on logged groups ({completions, base_rewards}).

    `reweight(method, groups) -> list of advantage lists` asks the service (advantages
    "grpo"). Per group: the mean |A_dra - A_grpo| over its members; the summary is the median
    over groups, and `dra_is_grpo` says whether it is below DRA_SAME.
    """
    gs = [g for g in groups if len(g["completions"]) > 1]
    if not gs:
        return {"groups": 0, "median_abs_change": None, "dra_is_grpo": None}
    grpo = reweight("none", gs)
    dra = reweight("dra", gs)
    change = [float(np.mean(np.abs(np.subtract(d, g)))) for d, g in zip(dra, grpo, strict=True)]
    med = float(np.median(change))
    return {
        "groups": len(gs),
        "median_abs_change": med,
        "p90_abs_change": float(np.percentile(change, 90)),
        "threshold": DRA_SAME,
        "dra_is_grpo": med < DRA_SAME,
    }
