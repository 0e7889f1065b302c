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

from .metrics import (
    CLAIM,
    GROUP,
    MIN_GAIN,
    REFUTE,
    RULE,
    TARGET_SE,
    WINDOW,
    decide,
    paired,
    seed_ratio,
)

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
        "constants": {"window": WINDOW, "group": GROUP, "target_se": TARGET_SE,
                      "min_gain": MIN_GAIN, "claim": CLAIM, "refute": REFUTE, "min_seeds": 5},
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


SCENARIOS = [(top, ramp, speed) for top in (0.5, 0.7) for ramp in (20, 30, 40)
             for speed in (1.0, 0.8, 0.52)]
"""Simulated training: accuracy climbs linearly from 0.24 (the gate) to `top` in `ramp` steps
for GRPO and in ramp * speed steps for MMR (0.52: the paper's claim), then stays; each step's
accuracy is Binomial(8, p) / 8."""


def operating_characteristics(n: int = 300, seeds: int = 6, steps: int = 40, start: float = 0.24,
                              seed: int = 0) -> list[dict[str, Any]]:
    """How often RULE says each verdict in each scenario: P(confirmed | no effect), power, ..."""
    rng = np.random.default_rng(seed)

    def curve(top: float, ramp: float) -> list[float]:
        p = start + (top - start) * np.minimum(np.arange(steps) / max(ramp, 1.0), 1.0)
        return (rng.binomial(GROUP, p) / GROUP).tolist()

    rows = []
    for top, ramp, speed in SCENARIOS:
        counts = {"confirmed": 0, "refuted": 0, "inconclusive": 0}
        for _ in range(n):
            per = {s: seed_ratio(curve(top, ramp), curve(top, ramp * speed))
                   for s in range(seeds)}
            counts[decide(per)] += 1
        rows.append({"top": top, "ramp": ramp, "speed": speed,
                     **{k: v / n for k, v in counts.items()}})
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m reweighter_trainer.decision --simulate [N]`: the rule's operating
    characteristics as a markdown table (EXPERIMENTS.md quotes it)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "--simulate":
        print("usage: python -m reweighter_trainer.decision --simulate [N experiments per row]")
        return 2
    n = int(args[1]) if len(args) > 1 else 300
    print("| GRPO reaches | in steps | MMR speed | confirmed | refuted | inconclusive |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in operating_characteristics(n):
        print(f"| {r['top']} | {r['ramp']} | x{r['speed']} | {r['confirmed']:.2f} | "
              f"{r['refuted']:.2f} | {r['inconclusive']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
