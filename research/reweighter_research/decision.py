"""The experiment's pre-registered decision (EXPERIMENTS.md) and the offline DRA check.

`decision(runs)` pairs GRPO and MMR runs by seed and applies metrics.RULE; `dra_offline`
recomputes DRA's advantages on the logged GRPO groups through a live service. Both are plain
functions over results.json entries and group logs, so they run on synthetic logs in tests.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
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
    trailing,
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


GROUP_LOG = ".groups.jsonl"
"""A run's group log, OUT/runs/<arm>-<seed>.groups.jsonl: one JSON line per training group. A run
writes it plain; the committed runs under experiments/ keep it gzipped (`.groups.jsonl.gz`, about
a sixth of the bytes), so readers find logs with `group_logs` and read them with `read_groups`."""


def group_logs(runs: Path, arm: str = "*") -> list[Path]:
    """The group logs in a runs folder whose name starts `<arm>-` (a glob, as `grpo-*` always
    matched: `grpo` takes grpo-passk's too), plain or gzipped, sorted by name."""
    found = [*runs.glob(f"{arm}-*{GROUP_LOG}"), *runs.glob(f"{arm}-*{GROUP_LOG}.gz")]
    return sorted(found, key=lambda p: p.name)


def read_groups(path: Path | str) -> list[dict[str, Any]]:
    """The groups of one log, plain or gzipped (by its `.gz` suffix)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


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


# --- the audit of pickone (issue 31): every figure EXPERIMENTS.md quotes beside its verdict ----

SPEEDUP = 0.52
"""The paper's claim: MMR-GRPO reaches GRPO's accuracy in 52 % of the steps (47.9 % fewer)."""


def compressed(curve: Sequence[float], speed: float = SPEEDUP, window: int = WINDOW
               ) -> list[float]:
    """The curve a `1 / speed`-times faster learner would log: step t (1-based) takes the
    accuracy `curve` had at step t / speed (linear between steps); past the budget, the mean of
    the last `window` steps (the plateau it had reached)."""
    c = np.asarray(curve, dtype=np.float64)
    n = len(c)
    tail = float(c[-window:].mean())
    out = []
    for t in range(1, n + 1):
        x = t / speed
        out.append(float(np.interp(x, np.arange(1, n + 1), c)) if x <= n else tail)
    return out


def delta_for_speedup(curves: Sequence[Sequence[float]], speed: float = SPEEDUP) -> float:
    """The paired gain in mean accuracy over the budget that a true speed-up predicts: mean over
    curves of mean(compressed(curve)) - mean(curve)."""
    return float(np.mean([np.mean(compressed(c, speed)) - np.mean(c) for c in curves]))


def overdispersion(curve: Sequence[float], group: int, window: int = 5) -> float:
    """Var of a run's per-step accuracy around its centred `window`-step moving mean, over the
    binomial variance mean(p(1-p)/group) at that mean (1: binomial; more: prompts differ in
    difficulty, which one prompt per step cannot average away). The moving mean itself is noisy,
    so this is a lower bound-leaning estimate (a mean of `window` steps removes part of the noise:
    the residual variance is scaled back by window / (window - 1))."""
    c = np.asarray(curve, dtype=np.float64)
    half = window // 2
    res, binv = [], []
    for t in range(half, len(c) - half):
        m = float(c[t - half : t + half + 1].mean())
        res.append(c[t] - m)
        binv.append(m * (1 - m) / group)
    bin_var = float(np.mean(binv))
    if bin_var <= 0:
        return float("nan")
    return float(np.var(res, ddof=1) * window / (window - 1) / bin_var)


def t_interval(d: Sequence[float], level: float) -> tuple[float, float, float, float]:
    """(mean, standard error, lower, upper) of the two-sided `level` t interval of paired
    differences `d`."""
    from scipy import stats

    x = np.asarray(d, dtype=np.float64)
    m, se = float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x)))
    q = float(stats.t.ppf(0.5 + level / 2, len(x) - 1))
    return m, se, m - q * se, m + q * se


def audit_pickone(results: dict[str, Any], group_logs: dict[str, list[dict]] | None = None
                  ) -> dict[str, Any]:
    """The pickone verdict read again from its own per-step curves (issue 31): the ceiling, the
    rule's dependence on which arm sets the target and on the target's offset, the rule as first
    committed, the learning-curve area against what a 2x speed-up predicts, the steps'
    overdispersion and, from MMR's group logs, the groups `equal_rewards: keep` left alone."""
    by = {(r["method"], r["seed"]): r["accuracy_curve"] for r in results["runs"]}
    seeds = sorted(s for (m, s) in by if m == "grpo" and ("mmr", s) in by)
    g = {s: by[("grpo", s)] for s in seeds}
    m = {s: by[("mmr", s)] for s in seeds}

    def median_ratio(a, b, target_se):
        per = {s: seed_ratio(a[s], b[s], target_se=target_se) for s in seeds}
        rs = [p["ratio"] for p in per.values() if p.get("informative")]
        return float(np.median(rs)), decide(per), per

    def first_rule(per):  # commit 3004225: target = the peak, claim 0.75
        rs = [p["ratio"] for p in per.values() if p.get("informative")]
        if len(rs) < 5:
            return "inconclusive"
        if all(r < 1 for r in rs) and float(np.median(rs)) <= 0.75:
            return "confirmed"
        if sum(r <= 0.75 for r in rs) <= 1:
            return "refuted"
        return "inconclusive"

    per1 = {s: seed_ratio(g[s], m[s]) for s in seeds}
    offsets = {str(k): median_ratio(g, m, k)[0] for k in (0, 1, 2)}
    swapped_median, swapped_verdict, per_sw = median_ratio(m, g, TARGET_SE)
    # the same swap, counting the seeds GRPO's rule counted (GRPO learned on them)
    sw_same = float(np.median([per_sw[s]["ratio"] for s in seeds if per1[s]["informative"]]))
    _, _, per0 = median_ratio(g, m, 0.0)
    area = [float(np.mean(m[s]) - np.mean(g[s])) for s in seeds]
    mean, se, lo, hi = t_interval(area, 0.95)
    out: dict[str, Any] = {
        "seeds": seeds,
        "grpo_peak": {str(s): max(trailing(g[s])) for s in seeds},
        "target": {str(s): per1[s]["target"] for s in seeds},
        "mmr_peak": {str(s): max(trailing(m[s])) for s in seeds},
        "verdict": decide(per1),
        "median_ratio_by_target_se": offsets,
        "swapped_roles": {"median_ratio": swapped_median, "verdict": swapped_verdict,
                          "median_ratio_grpo_informative_seeds": sw_same},
        "first_rule_verdict": first_rule(per0),
        "area_diff": {"per_seed": area, "mean": mean, "se": se, "ci95": [lo, hi]},
        "delta_2x": delta_for_speedup([g[s] for s in seeds]),
        "overdispersion": {f"{k}-{s}": overdispersion(by[(k, s)], GROUP)
                           for k in ("grpo", "mmr") for s in seeds},
    }
    if group_logs and "mmr" in group_logs:
        gs = group_logs["mmr"]
        tied = [x for x in gs if len(set(x["base_rewards"])) == 1]
        kept = [x for x in tied  # the service's float round trip moves the last digit
                if np.allclose(x["rewards"], x["base_rewards"], rtol=0, atol=1e-9)]
        out["mmr_groups"] = {"groups": len(gs), "all_rewards_equal": len(tied),
                             "left_unchanged": len(kept)}
    return out


# --- the picktwo rule (issue 31, item 5; pre-registered in EXPERIMENTS.md) --------------------

AREA_LEVEL = 0.95
"""Family-wise confidence of the per-arm intervals (Bonferroni over the arms compared)."""

AREA_RULE = (
    "Primary metric per run: mean training accuracy over the step budget (the learning-curve "
    "area; training accuracy per step = the fraction of the step's completions the task's "
    "checker accepts). Per arm A vs GRPO: the paired differences d_s = area(A, s) - area(GRPO, "
    "s) over the seeds s both ran; their two-sided t interval at family-wise 95 % (each at "
    "1 - 0.05 / k, k = the number of arms compared with GRPO). 'speeds up' if the lower bound "
    "> 0; 'refuted' if the upper bound < delta_2x (the gain a true 2x speed-up predicts, fixed "
    "from the pilot); else 'inconclusive'. Secondary, reported not voted: held-out accuracy, "
    "pass@k, distinct correct answers per prompt, steps to the pilot's threshold."
)


def area(curve: Sequence[float]) -> float:
    """The learning-curve area: mean training accuracy over the steps run."""
    return float(np.mean(curve))


def area_verdict(d: Sequence[float], delta_2x: float, arms: int, level: float = AREA_LEVEL
                 ) -> dict[str, Any]:
    """AREA_RULE for one arm from its paired differences `d` (one per seed)."""
    if len(d) < 2:
        return {"verdict": "inconclusive", "reason": "fewer than 2 paired seeds", "n": len(d)}
    each = 1 - (1 - level) / max(arms, 1)
    mean, se, lo, hi = t_interval(d, each)
    verdict = "speeds up" if lo > 0 else "refuted" if hi < delta_2x else "inconclusive"
    return {"verdict": verdict, "n": len(d), "mean": mean, "se": se, "level": each,
            "interval": [lo, hi], "diffs": list(map(float, d))}


def area_decision(runs: list[dict[str, Any]], delta_2x: float, base: str = "grpo",
                  arms: Sequence[str] | None = None) -> dict[str, Any]:
    """AREA_RULE over results.json runs: {verdict_per_arm, intervals, delta_2x, rule}."""
    by = {(r["method"], r["seed"]): r for r in runs}
    arms = sorted({m for m, _ in by if m != base}) if arms is None else list(arms)
    per = {}
    for arm in arms:
        seeds = sorted(s for m, s in by if m == base and (arm, s) in by)
        d = [area(by[(arm, s)]["accuracy_curve"]) - area(by[(base, s)]["accuracy_curve"])
             for s in seeds]
        per[arm] = {**area_verdict(d, delta_2x, len(arms)), "seeds": seeds}
    return {"rule": AREA_RULE, "base": base, "delta_2x": delta_2x,
            "verdict_per_arm": {a: v["verdict"] for a, v in per.items()}, "intervals": per}


def fitted_ramp(curves: Sequence[Sequence[float]], window: int = 5) -> list[float]:
    """The pilot's mean curve over seeds, smoothed by a centred `window`-step mean (shorter at
    the ends): the ramp the power simulation draws around."""
    c = np.mean(np.asarray(curves, dtype=np.float64), axis=0)
    half = window // 2
    return [float(c[max(0, t - half) : t + half + 1].mean()) for t in range(len(c))]


def _warp(ramp: np.ndarray, factor: np.ndarray, tail: float) -> np.ndarray:
    """The ramp run `factor` times as fast, for an array of factors (shape F -> F x steps):
    step t takes the ramp at t * factor, the plateau `tail` past the end."""
    n = len(ramp)
    x = np.arange(1, n + 1)[None, :] * np.asarray(factor, dtype=np.float64)[..., None]
    return np.where(x <= n, np.interp(x, np.arange(1, n + 1), ramp), tail)


def _areas(rng: np.random.Generator, ramp: np.ndarray, factor: np.ndarray, phi: float,
           group: int) -> np.ndarray:
    """Simulated areas of runs at speeds `factor` (any shape): beta-binomial steps with mean
    the warped ramp and variance `phi` times binomial's, over `group` completions."""
    tail = float(ramp[-10:].mean())
    p = np.clip(_warp(ramp, factor, tail), 1e-3, 1 - 1e-3)
    rho = min(max((phi - 1) / (group - 1), 1e-6), 0.999)  # phi = 1 + (g - 1) rho
    q = rng.beta(p * (1 / rho - 1), (1 - p) * (1 / rho - 1))
    return (rng.binomial(group, q) / group).mean(axis=-1)


def matched_speed(ramp: Sequence[float], delta: float) -> float:
    """The smallest speed factor x at which the warped `ramp` gains `delta` in area over the
    ramp itself (bisection; the gain grows with x, in small steps). issue 40: warping the
    *smoothed* ramp by 1/0.52 gains more (picktwo: ~0.067) than the rule's delta_2x from the
    raw pilot curves (0.0476), so a simulation at 1/0.52 tested the rule against an effect
    41 % larger than its own 2x. Simulating at this factor makes "a true 2x speed-up" mean
    the rule's delta_2x."""
    r = np.asarray(ramp, dtype=np.float64)
    tail = float(r[-10:].mean())

    def gain(x: float) -> float:
        return float(_warp(r, np.array([x]), tail).mean() - r.mean())

    lo, hi = 1.0, 1.0 / SPEEDUP
    while gain(hi) < delta and hi < 64:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gain(mid) < delta else (lo, mid)
    # the smallest factor gaining at least delta (the gain steps where a warped step passes the
    # budget and takes the plateau, so "exactly" is within that step)
    return hi


def simulate_power(ramp: Sequence[float], *, phi: float, tau: float, seeds: int, arms: int,
                   delta_2x: float, group: int, n: int = 2000, seed: int = 0,
                   match_delta: bool = True) -> dict[str, float]:
    """How often AREA_RULE says each verdict for one arm under no effect and under a true 2x
    speed-up, `seeds` paired seeds, `arms` arms in the Bonferroni family.

    Each run follows the pilot's `ramp` at a speed of its own, exp(N(0, tau^2)) (runs diverge:
    one takes off earlier than another; tau is fitted to the pilot's seed-to-seed spread), times
    the 2x factor for the faster arm; each step's accuracy is beta-binomial with mean p and
    variance `phi` times binomial's (the measured overdispersion), over `group` completions.
    The 2x factor is `matched_speed(ramp, delta_2x)` (issue 40): the speed at which the ramp
    gains exactly the rule's delta_2x, so power is against the effect the rule calls 2x;
    `match_delta=False` gives the old 1 / 0.52 on the smoothed ramp (its figures, reproduced).
    """
    from scipy import stats

    rng = np.random.default_rng(seed)
    r = np.asarray(ramp, dtype=np.float64)
    q = float(stats.t.ppf(1 - (1 - AREA_LEVEL) / max(arms, 1) / 2, seeds - 1))
    out = {}
    fast = matched_speed(r, delta_2x) if match_delta else 1 / SPEEDUP
    for name, speed in (("no_effect", 1.0), ("2x", fast)):
        base = _areas(rng, r, np.exp(rng.normal(0, tau, (n, seeds))), phi, group)
        arm = _areas(rng, r, speed * np.exp(rng.normal(0, tau, (n, seeds))), phi, group)
        d = arm - base
        m, se = d.mean(axis=1), d.std(axis=1, ddof=1) / np.sqrt(seeds)
        up, ref = m - q * se > 0, m + q * se < delta_2x
        out.update({f"{name}:speeds up": float(up.mean()),
                    f"{name}:refuted": float((ref & ~up).mean()),
                    f"{name}:inconclusive": float((~up & ~ref).mean())})
    return out


def fit_tau(curves: Sequence[Sequence[float]], ramp: Sequence[float], phi: float, group: int,
            n: int = 4000, seed: int = 0) -> float:
    """The run-speed spread tau whose simulated sd of a run's area matches the sd of the
    observed runs' areas (a grid search; 0 when step noise alone explains the spread)."""
    target = float(np.std([area(c) for c in curves], ddof=1))
    rng = np.random.default_rng(seed)
    r = np.asarray(ramp, dtype=np.float64)
    grid = np.linspace(0, 1.0, 41)
    sds = [float(np.std(_areas(rng, r, np.exp(rng.normal(0, t, n)), phi, group), ddof=1))
           for t in grid]
    return float(grid[int(np.argmin(np.abs(np.array(sds) - target)))])


def fit_tau_paired(ramp: Sequence[float], phi: float, group: int, paired_sd: float,
                   n: int = 20000, seed: int = 1) -> float:
    """The run-speed spread tau whose simulated sd of a paired difference (two independent
    runs, no effect) equals `paired_sd`, an observed one (pickone's: 0.077)."""
    rng = np.random.default_rng(seed)
    r = np.asarray(ramp, dtype=np.float64)
    grid = np.linspace(0, 0.6, 25)
    sds = [float(np.std(_areas(rng, r, np.exp(rng.normal(0, t, n)), phi, group)
                        - _areas(rng, r, np.exp(rng.normal(0, t, n)), phi, group)))
           for t in grid]
    return float(grid[int(np.argmin(np.abs(np.array(sds) - paired_sd)))])


POWER_SEEDS = (8, 10, 12, 16)
POWER_ARMS = (1, 2, 3, 4)


PILOT_MIN_STEPS = 10
"""The shortest pilot `pilot_summary` reads: its last-10-step plateau needs 10 steps."""


def pilot_summary(results: dict[str, Any], n: int = 1000, group: int | None = None,
                  paired_sd: float | None = None) -> dict[str, Any]:
    """What the pilot fixes (issue 31, item 3) from its GRPO runs' per-step curves: delta_2x,
    the overdispersion phi (mean over runs), the run-speed spread tau, the ramp, the threshold
    for the secondary "steps to threshold" (half-way from the first 5 steps' mean to the last
    10 steps' mean), saturation (mean of the last 10 steps over seeds), and the power table of
    AREA_RULE (n simulated experiments per row) at tau and, given an observed `paired_sd`, at
    the tau calibrated to it (fit_tau_paired; else at 2 tau)."""
    curves = [r["accuracy_curve"] for r in results["runs"] if r["method"] == "grpo"]
    if not curves:
        raise ValueError("no GRPO run in results.json: a pilot is GRPO's per-step curves")
    steps = min(len(c) for c in curves)
    if steps < PILOT_MIN_STEPS:  # else NaN overdispersion, and the simulation's beta fails
        raise ValueError(
            f"the GRPO curves have {steps} steps; a pilot needs at least {PILOT_MIN_STEPS} "
            "(its first 5 and last 10 steps, and the per-step overdispersion around a 5-step mean)"
        )
    curves = [c[:steps] for c in curves]
    g = group or int(results["task"].get("completions_per_step") or GROUP)
    phis = [overdispersion(c, g) for c in curves]
    phi = float(np.nanmean(phis))
    ramp = fitted_ramp(curves)
    delta = delta_for_speedup(curves)
    tau = fit_tau(curves, ramp, phi, g)
    first = float(np.mean([np.mean(c[:5]) for c in curves]))
    last = float(np.mean([np.mean(c[-10:]) for c in curves]))
    power = []
    tau_paired = fit_tau_paired(ramp, phi, g, paired_sd) if paired_sd else None
    for t in (tau, tau_paired if tau_paired is not None else max(2 * tau, 0.2)):
        for k in POWER_ARMS:
            for seeds in POWER_SEEDS:
                row = simulate_power(ramp, phi=phi, tau=t, seeds=seeds, arms=k, delta_2x=delta,
                                     group=g, n=n, seed=seeds * 10 + k)
                power.append({"tau": t, "arms": k, "seeds": seeds,
                              "power_2x": row["2x:speeds up"],
                              "false_speedup": row["no_effect:speeds up"],
                              "refuted_under_2x": row["2x:refuted"],
                              "refuted_under_no_effect": row["no_effect:refuted"]})
    return {
        "steps": steps,
        "seeds": sorted(r["seed"] for r in results["runs"] if r["method"] == "grpo"),
        "completions_per_step": g, "learning_rate": results["task"].get("learning_rate"),
        "delta_2x": delta, "phi": phi, "phi_per_run": phis, "tau": tau,
        "tau_paired": tau_paired, "paired_sd": paired_sd,
        "areas": [area(c) for c in curves], "first5_mean": first, "last10_mean": last,
        "saturated": last > 0.85, "threshold": (first + last) / 2, "ramp": ramp,
        "power": power,
    }


# --- wordadd (issue 40, item 3; pre-registered in EXPERIMENTS.md before any main-run data) ----

CONTROL = "grpo-2xlr"
"""The positive control: GRPO at twice the learning rate. It must come out "speeds up"."""
MIN_GAIN_GATE = 0.10
"""Validity gate: GRPO's mean (last-10 mean - first-5 mean) over seeds must reach this."""
MAX_LAST10_GATE = 0.85
"""Validity gate: GRPO's mean last-10 accuracy over seeds must not exceed this (saturation)."""
MIN_COMPLETE_SEEDS = 8
"""Fewer seeds with every arm finished than this: no verdict (the run was cut short)."""
SPEEDUP_GRID = tuple(round(1.0 + 0.01 * i, 2) for i in range(1, 201))
"""Speed-ups (1.01x to 3.00x) against which each interval's upper bound is read."""

WORDADD_RULE = (
    "Seeds: those on which grpo, every compared arm and the control all finished (at least "
    f"{MIN_COMPLETE_SEEDS}, else no verdict). delta_2x = delta_for_speedup(GRPO's raw per-step "
    "training-accuracy curves on those seeds) (the mean gain in area a 1/0.52x compression "
    "predicts). Validity gates, all required, else no verdict for any arm: (1) GRPO improves: "
    "mean over seeds of mean(last 10 steps) - mean(first 5 steps) >= 0.10; (2) GRPO does not "
    "saturate: mean over seeds of mean(last 10 steps) <= 0.85; (3) the positive control "
    "(GRPO at 2x the learning rate) 'speeds up' by the area rule at 95 % (its own family of "
    "one). Then AREA_RULE for the non-control arms against GRPO, family-wise 95 % over those "
    "arms only, with that delta_2x. For every arm (control included): the smallest speed-up x "
    "on a 0.01 grid from 1.01x to 3.00x from which on the interval's upper bound lies below "
    "the gain delta_for_speedup(GRPO curves, 1/x) predicts (the speed-ups it excludes)."
)


def excluded_from(upper: float, curves: Sequence[Sequence[float]],
                  grid: Sequence[float] = SPEEDUP_GRID) -> float | None:
    """The smallest speed-up x in `grid` such that x and every larger grid speed-up predict a
    gain (delta_for_speedup(curves, 1/x)) above `upper`, an interval's upper bound: the
    speed-ups that interval excludes are x and beyond. None when it excludes none of them."""
    deltas = [delta_for_speedup(curves, 1 / x) for x in grid]
    best = None
    for x, d in zip(reversed(grid), reversed(deltas), strict=True):
        if d > upper:
            best = x
        else:
            break
    return best


def wordadd_decision(runs: list[dict[str, Any]], arms: Sequence[str] = ("mmr",),
                     control: str = CONTROL, base: str = "grpo") -> dict[str, Any]:
    """WORDADD_RULE over results.json runs: the gates, the verdicts, the excluded speed-ups."""
    by = {(r["method"], r["seed"]): r for r in runs}
    need = [base, *arms, control]
    seeds = sorted({s for _, s in by if all((m, s) in by for m in need)})
    out: dict[str, Any] = {"rule": WORDADD_RULE, "base": base, "arms": list(arms),
                           "control": control, "seeds": seeds}
    if len(seeds) < MIN_COMPLETE_SEEDS:
        out.update(verdict_per_arm={a: "no verdict" for a in arms},
                   reason=f"{len(seeds)} seeds with every arm finished, fewer than "
                          f"{MIN_COMPLETE_SEEDS}")
        return out
    curves = [by[(base, s)]["accuracy_curve"] for s in seeds]
    delta = delta_for_speedup(curves)
    gain = float(np.mean([np.mean(c[-10:]) - np.mean(c[:5]) for c in curves]))
    last = float(np.mean([np.mean(c[-10:]) for c in curves]))

    def diffs(arm: str) -> list[float]:
        return [area(by[(arm, s)]["accuracy_curve"]) - area(by[(base, s)]["accuracy_curve"])
                for s in seeds]

    ctrl = area_verdict(diffs(control), delta, 1)
    gates = {"grpo_gain": {"value": gain, "min": MIN_GAIN_GATE, "passed": gain >= MIN_GAIN_GATE},
             "grpo_last10": {"value": last, "max": MAX_LAST10_GATE,
                             "passed": last <= MAX_LAST10_GATE},
             "control_speeds_up": {"verdict": ctrl["verdict"],
                                   "passed": ctrl["verdict"] == "speeds up"}}
    valid = all(g["passed"] for g in gates.values())
    per = {a: area_verdict(diffs(a), delta, len(arms)) for a in arms}
    for v in [*per.values(), ctrl]:
        v["excluded_from"] = excluded_from(v["interval"][1], curves) if "interval" in v else None
    out.update(
        delta_2x=delta, gates=gates, valid=valid,
        verdict_per_arm={a: (v["verdict"] if valid else "no verdict") for a, v in per.items()},
        intervals=per, control_interval=ctrl,
        reason=None if valid else "validity gate failed: " + ", ".join(
            k for k, g in gates.items() if not g["passed"]),
    )
    return out


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


def audit_dir(out: Path) -> dict[str, Any]:
    """audit_pickone over OUT/results.json and OUT/runs/mmr-*.groups.jsonl (or .gz)."""
    results = json.loads((out / "results.json").read_text())
    logs = {"mmr": [g for p in group_logs(out / "runs", "mmr") for g in read_groups(p)]}
    return audit_pickone(results, logs)


def main(argv: list[str] | None = None) -> int:
    """`python -m reweighter_research.decision --simulate [N]`: the first rule's operating
    characteristics as a markdown table; `--audit DIR`: the pickone audit (EXPERIMENTS.md) as
    JSON; `--verdicts DIR [DIR ...]`: every verdict of an experiment folder (or of every folder
    of experiments/), recomputed from its committed files, read-only (verdicts.py); `--pilot
    DIR`: writes DIR/pilot.json (the pilot's figures and power table: an authoring step)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "--verdicts":
        from .verdicts import main as verdicts_main

        return verdicts_main(args[1:])
    if len(args) == 2 and args[0] == "--audit":
        print(json.dumps(audit_dir(Path(args[1])), indent=2))
        return 0
    if len(args) >= 2 and args[0] == "--pilot":
        out = Path(args[1])
        rest = args[2:]
        paired = float(rest[rest.index("--paired-sd") + 1]) if "--paired-sd" in rest else None
        num = [a for a in rest if a.isdigit()]
        try:
            summary = pilot_summary(json.loads((out / "results.json").read_text()),
                                    n=int(num[0]) if num else 1000, paired_sd=paired)
        except ValueError as e:
            print(f"decision --pilot {out}: {e}", file=sys.stderr)
            return 2
        (out / "pilot.json").write_text(json.dumps(summary, indent=2))
        print("| tau | arms | seeds | P(speeds up), true 2x | P(speeds up), no effect | "
              "P(refuted), true 2x | P(refuted), no effect |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in summary["power"]:
            print(f"| {r['tau']:.2f} | {r['arms']} | {r['seeds']} | {r['power_2x']:.2f} | "
                  f"{r['false_speedup']:.3f} | {r['refuted_under_2x']:.3f} | "
                  f"{r['refuted_under_no_effect']:.2f} |")
        keys = ("steps", "seeds", "delta_2x", "phi", "tau", "tau_paired", "first5_mean",
                "last10_mean", "saturated", "threshold")
        print(json.dumps({k: summary[k] for k in keys}))
        return 0
    if not args or args[0] != "--simulate":
        print("usage: python -m reweighter_research.decision --simulate [N] | --audit DIR | "
              "--verdicts DIR [DIR ...] | --pilot DIR [N] [--paired-sd SD]")
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
