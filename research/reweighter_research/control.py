"""picktwo's calibrated positive control (issue 49, item 5), as pre-registered.

experiments/picktwo-control/PREREGISTRATION.md (commit 549b67d, before any data) fixes the arms,
seeds, rule and hypotheses; this module is that text as code, and a test holds its constants to
the document's numbers:

- arms `grpo` (5e-6), `grpo-2xlr`, `grpo-1.3xlr` (experiment.ARM_LR_SCALE) and `mmr`, seeds
  300-311, picktwo-main's config (50 steps, 27 held-out prompts x 8 samples);
- the rule: picktwo-main's area rule at its settings (`decision.area_verdict`: two-sided t
  interval of the paired area differences at 98.75 %, against delta_2x 0.047558);
- H1, the calibration: C1 `grpo-2xlr` "speeds up" and C2 `grpo-1.3xlr` not "refuted"; either
  failing withdraws every picktwo refutation (PICKTWO_REFUTATIONS);
- H2, confirmatory: MMR's held-out distinct correct answers exceed GRPO's (one-sided paired t
  test, alpha 0.05);
- a hypothesis is decided on the seeds on which all its arms finished, at least MIN_SEEDS.

    python -m reweighter_research.control --decide experiments/picktwo-control   # read-only
    python -m reweighter_research.control --dry-run /tmp/control-dry             # CPU, toy size

The device runs it through `bench/gpu/gpu_control.sh` (bench/gpu/gpu_experiment.sh's `run`,
`--rule control`: experiment.py calls `control_decision` for results.json). The dry run goes
the same way on this machine at toy size: a real `reweighter serve` on loopback, the same
SmolLM2 policy on the CPU (the tiny local model has no chat template, and picktwo's prompts are
chats), 2 seeds x 2 steps of 8 tokens, `--jobs 2`, then this rule on what it wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .decision import area, area_verdict, excluded_from

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "experiments" / "picktwo-control"
CONFIG = "research/configs/smollm2-picktwo.yaml"
BASE = "grpo"
FAST = "grpo-2xlr"
NEAR = "grpo-1.3xlr"
METHOD = "mmr"
ARMS = (BASE, FAST, NEAR, METHOD)
"""In the order each process trains them (the calibration's arms first)."""
SEEDS = tuple(range(300, 312))
STEPS = 50
EVAL_PROMPTS = 27
SAMPLES = 8
DELTA_2X = 0.047557692307692134
"""Pilot 2's delta_2x (experiments/picktwo-pilot-lr5e-6/pilot.json): every picktwo-main
verdict's."""
FAMILY = 4
"""picktwo-main's Bonferroni family: each interval at 1 - 0.05 / 4 = 98.75 % (area_verdict)."""
ALPHA = 0.05
"""H2: one-sided paired t test of MMR's held-out distinct correct answers over GRPO's."""
MIN_SEEDS = 10
"""Fewer complete seeds than this: the hypothesis is not decided."""
PILOT = REPO / "experiments" / "picktwo-pilot-lr5e-6"
PICKTWO_REFUTATIONS = (
    "picktwo-main: mmr",
    "picktwo-main: dra",
    "picktwo-main: darling",
    "picktwo-main: grpo-passk",
    "picktwo-scale: mmr",
)
NOT_RUN = "not run: no GPU lent"


def complete(by: dict[tuple[str, int], dict], arms: Sequence[str]) -> list[int]:
    """The seeds on which every arm in `arms` finished (a finished run is a results entry)."""
    seeds = {s for _, s in by}
    return sorted(s for s in seeds if all((a, s) in by for a in arms))


def pilot_curves(folder: Path = PILOT) -> list[list[float]]:
    """The pilot's GRPO curves: the reference of every picktwo `excluded_from`."""
    return [
        json.loads(p.read_text())["accuracy_curve"]
        for p in sorted((folder / "runs").glob("grpo-*.json"))
    ]


def one_sided_p(d: Sequence[float]) -> float:
    """p of the one-sided paired t test H0: mean(d) <= 0 (NaN when d has no spread)."""
    from scipy import stats

    x = np.asarray(d, dtype=np.float64)
    if len(x) < 2 or float(x.std(ddof=1)) == 0.0:
        return 0.0 if len(x) >= 2 and float(x.mean()) > 0 else float("nan")
    return float(stats.ttest_1samp(x, 0.0, alternative="greater").pvalue)


def control_decision(
    runs: list[dict[str, Any]],
    delta_2x: float = DELTA_2X,
    min_seeds: int = MIN_SEEDS,
    reference: Sequence[Sequence[float]] | None = None,
) -> dict[str, Any]:
    """The pre-registered decision over results.json runs: H1 (the calibration and what it
    decides about the picktwo refutations), H2 (confirmatory), MMR's area verdict and the
    secondary leads (reported). `reference`: the curves `excluded_from` reads (the pilot's)."""
    by = {(r["method"], r["seed"]): r for r in runs}
    ref = pilot_curves() if reference is None else [list(c) for c in reference]

    def verdict(arm: str, seeds: list[int]) -> dict[str, Any]:
        d = [
            area(by[(arm, s)]["accuracy_curve"]) - area(by[(BASE, s)]["accuracy_curve"])
            for s in seeds
        ]
        v = area_verdict(d, delta_2x, FAMILY)
        if "interval" in v and ref:
            v["excluded_from"] = excluded_from(v["interval"][1], ref)
        return {**v, "seeds": seeds}

    out: dict[str, Any] = {
        "preregistration": "experiments/picktwo-control/PREREGISTRATION.md",
        "delta_2x": delta_2x,
        "level": 1 - 0.05 / FAMILY,
        "min_seeds": min_seeds,
        "arms": list(ARMS),
    }
    cal_seeds = complete(by, (BASE, FAST, NEAR))
    if len(cal_seeds) < min_seeds:
        out["calibration"] = {
            "decided": False,
            "seeds": cal_seeds,
            "reason": f"{len(cal_seeds)} seeds with grpo, {FAST} and {NEAR} "
            f"finished, fewer than {min_seeds}",
        }
        out["picktwo_refutations"] = "not decided: the control has not run"
    else:
        fast, near = verdict(FAST, cal_seeds), verdict(NEAR, cal_seeds)
        c1, c2 = fast["verdict"] == "speeds up", near["verdict"] != "refuted"
        out["calibration"] = {
            "decided": True,
            "seeds": cal_seeds,
            "passed": c1 and c2,
            "C1_2x_speeds_up": c1,
            "C2_1.3x_not_refuted": c2,
            FAST: fast,
            NEAR: near,
        }
        out["picktwo_refutations"] = (
            "stand: calibrated"
            if c1 and c2
            else "withdrawn: the instrument failed its positive control"
        )
    mmr_seeds = complete(by, (BASE, METHOD))
    if len(mmr_seeds) < min_seeds:
        reason = f"{len(mmr_seeds)} seeds with grpo and mmr finished, fewer than {min_seeds}"
        out["H2_distinct_correct"] = {"decided": False, "seeds": mmr_seeds, "reason": reason}
        out["mmr_area"] = {"verdict": "not decided", "seeds": mmr_seeds, "reason": reason}
    else:
        d = [
            by[(METHOD, s)]["distinct_correct"] - by[(BASE, s)]["distinct_correct"]
            for s in mmr_seeds
        ]
        p = one_sided_p(d)
        out["H2_distinct_correct"] = {
            "decided": True,
            "seeds": mmr_seeds,
            "diffs": d,
            "mean": float(np.mean(d)),
            "p_one_sided": p,
            "alpha": ALPHA,
            "verdict": "confirmed" if p < ALPHA else "not confirmed",
        }
        out["mmr_area"] = verdict(METHOD, mmr_seeds)
    out["secondary"] = secondary(by)
    out["summary"] = summary(out)
    return out


def secondary(by: dict[tuple[str, int], dict]) -> dict[str, Any]:
    """Each arm's paired held-out leads against GRPO (95 % t intervals, each alone)."""
    from .decision import t_interval

    out: dict[str, Any] = {}
    for arm in ARMS[1:]:
        seeds = complete(by, (BASE, arm))
        if len(seeds) < 2:
            continue
        out[arm] = {}
        for key in ("accuracy", "sample_accuracy", "pass_at_k", "distinct_correct"):
            d = [by[(arm, s)][key] - by[(BASE, s)][key] for s in seeds]
            m, _, lo, hi = t_interval(d, 0.95)
            out[arm][key] = {"mean": m, "interval95": [lo, hi], "n": len(d)}
    last = [float(np.mean(by[(BASE, s)]["accuracy_curve"][-10:])) for s in complete(by, (BASE,))]
    out["grpo_last10"] = float(np.mean(last)) if last else None
    return out


def summary(d: dict[str, Any]) -> str:
    """One line: the calibration, the refutations it decides, H2, MMR's area verdict."""
    cal = d["calibration"]
    if not cal["decided"]:
        first = f"calibration not decided ({cal['reason']})"
    else:
        first = (
            f"calibration {'passed' if cal['passed'] else 'FAILED'} "
            f"({FAST}: {cal[FAST]['verdict']}, {NEAR}: {cal[NEAR]['verdict']})"
        )
    h2 = d["H2_distinct_correct"]
    second = (
        f"H2 {h2['verdict']} (p {h2['p_one_sided']:.3g})" if h2["decided"] else "H2 not decided"
    )
    return (
        f"{first}; picktwo refutations: {d['picktwo_refutations']}; {second}; "
        f"mmr area: {d['mmr_area']['verdict']}"
    )


def runs_of(folder: Path) -> list[dict[str, Any]]:
    """The finished runs in FOLDER/runs (what --collect-only would gather), by arm then seed."""
    found = []
    for p in sorted((folder / "runs").glob("*.json")):
        r = json.loads(p.read_text())
        if r.get("method") in ARMS:
            found.append(r)
    return found


def experiment_argv(
    out: Path,
    url: str,
    *,
    seeds: Sequence[int] = SEEDS,
    steps: int = STEPS,
    eval_prompts: int = EVAL_PROMPTS,
    samples: int = SAMPLES,
    jobs: int = 12,
    preregistered: str | None = None,
    overrides: Sequence[str] = (),
) -> list[str]:
    """`python -m reweighter_research.experiment`'s arguments for this experiment, as
    bench/gpu/gpu_experiment.sh composes them from gpu_control.sh's settings."""
    prereg = preregistered or (FOLDER / "PREREGISTERED").read_text().strip()
    return [
        "--config",
        str(REPO / CONFIG),
        "--out",
        str(out),
        "--url",
        url,
        "--methods",
        ",".join(ARMS),
        "--seeds",
        ",".join(map(str, seeds)),
        "--steps",
        str(steps),
        "--eval-prompts",
        str(eval_prompts),
        "--samples",
        str(samples),
        "--rule",
        "control",
        "--preregistered",
        prereg,
        "--no-dra-offline",
        *overrides,
        "--jobs",
        str(jobs),
    ]


DRY = {
    "seeds": (300, 301),
    "steps": 2,
    "eval_prompts": 1,
    "samples": 2,
    "jobs": 2,
    "overrides": (
        "use_cpu=true",
        "max_completion_length=8",
        "dataset.limit=16",
    ),
}
"""The CPU dry run's size: SmolLM2 on the CPU, 2 seeds x 2 steps, 8 tokens, 1 held-out
prompt x 2 samples (pass@2), two training processes."""


def dry_run(out: Path) -> dict[str, Any]:
    """The experiment at toy size on this machine, through experiment.main as the device runs
    it, against a real `reweighter serve` on loopback; then the rule on what it wrote, at the
    toy's seed count (results.json's own decision keeps MIN_SEEDS: "not decided")."""
    import os

    from reweighter.launch import serve

    from .experiment import main as experiment_main

    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    # a loaded 2-core machine takes minutes to load the encoder: more than serve's default 180 s
    with serve("--device", "cpu", "--no-compile", env=env, timeout=900) as served:
        argv = experiment_argv(
            out,
            served.url,
            seeds=DRY["seeds"],
            steps=DRY["steps"],
            eval_prompts=DRY["eval_prompts"],
            samples=DRY["samples"],
            jobs=DRY["jobs"],
            overrides=DRY["overrides"],
        )
        argv[argv.index("--samples") + 2 : argv.index("--samples") + 2] = ["--k", "2"]
        rc = experiment_main(argv)
    if rc != 0:
        raise RuntimeError(f"the dry run's experiment exited {rc}")
    results = json.loads((out / "results.json").read_text())
    toy = control_decision(results["runs"], min_seeds=len(DRY["seeds"]))
    return {"results_decision": results["decision"], "toy_decision": toy}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="picktwo's pre-registered positive control")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--decide", metavar="DIR", help="print the decision from DIR/runs (read-only)")
    g.add_argument("--dry-run", metavar="OUT", help="toy-size CPU run into OUT, then the rule")
    opts = p.parse_args(argv)
    if opts.decide:
        runs = runs_of(Path(opts.decide))
        if not runs:
            print(
                f"{opts.decide}: {NOT_RUN} (no finished run; the rule and its pre-registration "
                "are committed)"
            )
            return 0
        d = control_decision(runs)
        print(d["summary"])
        print(
            json.dumps(
                {k: d[k] for k in ("calibration", "H2_distinct_correct", "mmr_area")},
                indent=2,
                default=str,
            )
        )
        return 0
    out = Path(opts.dry_run)
    out.mkdir(parents=True, exist_ok=True)
    res = dry_run(out)
    print("results.json:", res["results_decision"]["summary"])
    print("toy (min seeds 2):", res["toy_decision"]["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
