"""Every verdict of an experiment folder, recomputed from its committed data, read-only.

    python -m reweighter_research.decision --verdicts experiments/picktwo-main
    python -m reweighter_research.decision --verdicts experiments        # every folder

`verdicts(folder)` reads a folder's results.json (and gate.json, groups_gap.json, its group
logs), applies the rule the folder was decided by (decision.area_decision for picktwo's area
rule, decision.wordadd_decision for wordadd's, decision.decision for pickone's step-ratio rule,
the pilot's items 3 and 7, the gate's `summarise`) to the per-step curves and per-prompt
records in the files, and returns what it finds beside what the file stored. Nothing is
written: the functions open files for reading only, and `render` returns text.

With the verdicts come the figures that frame them (issue 49, item 2), each a function here so
that tests recompute them:

- `speedup_map`: the gain a speed-up x predicts (decision.delta_for_speedup on the reference
  curves) over decision.SPEEDUP_GRID; the smallest x whose gain already reaches delta_2x, and
  how many grid steps go down (the map is not monotone on two curves);
- `t_power`: the rule's power against its own delta_2x at an observed paired sd (noncentral t:
  the same figures as the simulation where it can reach that sd);
- `secondary_family`: the secondary comparisons with their unadjusted and Bonferroni-adjusted
  p values over the whole family (arms x metrics);
- `zero_signal`: the groups whose advantages were all equal (no signal);
- `darling_replay`: the largest difference between the Darling arm's logged rewards and the
  pre-fix rule (a missing answer a class of its own) and the shipped rule (no answer: d = 0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import decision as dc
from .gate import BANDS, correct_similarity, summarise
from .metrics import WINDOW

SECONDARY = ("accuracy", "pass_at_k", "sample_accuracy", "distinct_correct")
"""The secondary metrics reported (not voted) beside picktwo's area rule: held-out greedy
accuracy, pass@8, sample accuracy, distinct correct answers per prompt."""
FAMILY_LEVEL = 0.05
"""Bonferroni: a secondary comparison survives when its p value times the family's size is
below this."""


# --- the figures that frame a verdict ----------------------------------------------------------


def grpo_curves(results: dict[str, Any], base: str = "grpo") -> list[list[float]]:
    return [r["accuracy_curve"] for r in results["runs"] if r["method"] == base]


def speedup_map(
    curves: Sequence[Sequence[float]], delta: float, grid: Sequence[float] = dc.SPEEDUP_GRID
) -> dict[str, Any]:
    """The gain each speed-up x of `grid` predicts on `curves` (delta_for_speedup(curves,
    1/x)): the smallest x whose gain reaches `delta`, the number of grid steps on which the
    gain goes down as x grows, and the gain at every grid point."""
    gains = [dc.delta_for_speedup(curves, 1 / x) for x in grid]
    reach = next((x for x, g in zip(grid, gains, strict=True) if g >= delta), None)
    down = sum(b < a for a, b in zip(gains, gains[1:], strict=False))
    return {
        "first_reaching": reach,
        "gain_at_first": gains[list(grid).index(reach)] if reach is not None else None,
        "down_steps": down,
        "steps": len(grid) - 1,
        "grid": list(grid),
        "gains": gains,
    }


def t_power(sd: float, n: int, delta: float, arms: int, level: float = dc.AREA_LEVEL) -> float:
    """P("speeds up") under a true effect `delta` (= P("refuted") under none) of the area rule
    with n paired seeds whose differences have sd `sd`, one arm of a Bonferroni family of
    `arms`: the noncentral t's tail beyond the interval's quantile."""
    from scipy import stats

    q = float(stats.t.ppf(1 - (1 - level) / max(arms, 1) / 2, n - 1))
    return float(stats.nct.sf(q, n - 1, delta / (sd / np.sqrt(n))))


def paired_p(d: Sequence[float]) -> float:
    """Two-sided p value of the paired t test of differences `d` against 0."""
    from scipy import stats

    return float(stats.ttest_1samp(np.asarray(d, dtype=np.float64), 0.0).pvalue)


def secondary_family(
    runs: list[dict[str, Any]],
    arms: Sequence[str],
    keys: Sequence[str] = SECONDARY,
    base: str = "grpo",
) -> list[dict[str, Any]]:
    """Each (arm, metric) paired against `base` by seed: mean, 95 % t interval, p, and p times
    the family's size (len(arms) x len(keys), capped at 1); `survives` when that is below
    FAMILY_LEVEL."""
    by = {(r["method"], r["seed"]): r for r in runs}
    family = len(arms) * len(keys)
    out = []
    for arm in arms:
        seeds = sorted(s for m, s in by if m == base and (arm, s) in by)
        for key in keys:
            if not all(key in by[(m, s)] for s in seeds for m in (base, arm)):
                continue
            d = [by[(arm, s)][key] - by[(base, s)][key] for s in seeds]
            m, _, lo, hi = dc.t_interval(d, 0.95)
            p = paired_p(d)
            out.append(
                {
                    "arm": arm,
                    "metric": key,
                    "n": len(d),
                    "mean": m,
                    "ci95": [lo, hi],
                    "p": p,
                    "p_bonferroni": min(1.0, p * family),
                    "family": family,
                    "survives": p * family < FAMILY_LEVEL,
                }
            )
    return out


def zero_signal(runs_dir: Path, arm: str) -> dict[str, int]:
    """An arm's logged groups whose advantages were all equal (no signal): for `grpo-passk` the
    returned rewards are the advantages, for every other arm the base rewards' spread decides."""
    n = z = 0
    for path in dc.group_logs(runs_dir):
        if not re.fullmatch(rf"{re.escape(arm)}-\d+\.groups\.jsonl(\.gz)?", path.name):
            continue
        for g in dc.read_groups(path):
            n += 1
            adv = np.asarray(g["rewards"] if arm == "grpo-passk" else g["base_rewards"])
            z += bool(np.allclose(adv, adv.mean(), atol=1e-12))
    return {"zero": z, "groups": n}


def darling_replay(runs_dir: Path, check: str = "pick_two") -> dict[str, Any]:
    """The Darling arm's logged rewards against `methods.darling` on the answers the trainer
    sent: under the pre-fix rule (a missing answer a class of its own, d = 1) and under the
    shipped one (no answer: d = 0). The largest |logged - replayed| over every group."""
    import torch

    from reweighter.methods import answer_labels, darling
    from reweighter_trainer.rewards import given_answer

    groups = dev_old = dev_new = 0.0
    for path in dc.group_logs(runs_dir, "darling"):
        for g in dc.read_groups(path):
            groups += 1
            given = [given_answer(t, g["gold"], check) for t in g["completions"]]
            r = torch.tensor(g["base_rewards"], dtype=torch.float64)
            labels = torch.tensor(answer_labels(given))
            logged = torch.tensor(g["rewards"], dtype=torch.float64)
            old = darling(r, labels)
            new = darling(r, labels, answered=torch.tensor([a is not None for a in given]))
            dev_old = max(dev_old, float((old - logged).abs().max()))
            dev_new = max(dev_new, float((new - logged).abs().max()))
    return {"groups": int(groups), "max_dev_prefix_rule": dev_old, "max_dev_shipped_rule": dev_new}


def darling_normalisation() -> dict[str, Any]:
    """How the Darling arm's advantages were normalised: the arm's config (experiment.ARM_CONFIG:
    no `scale_rewards` of its own) over TRL's GRPOConfig default (`scale_rewards="group"`: the
    reward's std divides, as GRPO's), where the paper's run sets `norm_adv_by_std_in_grpo=
    False` (docs/methods.md, Darling)."""
    from .experiment import ARM_CONFIG

    own = ARM_CONFIG.get("darling", {}).get("scale_rewards")
    try:
        from trl import GRPOConfig

        default = GRPOConfig.__dataclass_fields__["scale_rewards"].default
    except Exception:  # trl not installed: the extra `trainer`
        default = None
    return {
        "arm_scale_rewards": own,
        "trl_default": default,
        "std_normalised": (own or default) not in (None, "none", False),
    }


# --- one folder's verdicts ------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _reference(folder: Path, stored: dict[str, Any]) -> tuple[Path, list[list[float]]]:
    """The folder whose GRPO curves fixed delta_2x: the decision's `pilot` file's folder (a
    sibling of `folder`, as experiments/ holds them), else the folder itself."""
    pilot = stored.get("pilot")
    ref = folder.parent / Path(pilot).parent.name if pilot else folder
    results = _load(ref / "results.json")
    return ref, grpo_curves(results) if results else []


def area_verdicts(folder: Path, results: dict[str, Any]) -> dict[str, Any]:
    """picktwo's area rule (decision.AREA_RULE), recomputed, with its framing figures."""
    stored = results["decision"]
    ref, ref_curves = _reference(folder, stored)
    delta = dc.delta_for_speedup(ref_curves)
    arms = list(stored["verdict_per_arm"])
    got = dc.area_decision(results["runs"], delta, arms=arms)
    own = grpo_curves(results)
    per = {}
    for arm, v in got["intervals"].items():
        hi = v["interval"][1]
        per[arm] = {
            "verdict": v["verdict"],
            "n": v["n"],
            "mean": v["mean"],
            "level": v["level"],
            "interval": v["interval"],
            "p": paired_p(v["diffs"]),
            "sd": float(np.std(v["diffs"], ddof=1)),
            "power_at_sd": t_power(float(np.std(v["diffs"], ddof=1)), v["n"], delta, len(arms)),
            "excluded_from_reference": dc.excluded_from(hi, ref_curves),
            "excluded_from_own_grpo": dc.excluded_from(hi, own),
        }
    out = {
        "kind": "area rule (decision.AREA_RULE)",
        "arms": arms,
        "per_arm": per,
        "delta_2x": delta,
        "delta_2x_stored": stored["delta_2x"],
        "reference": ref.name,
        "reference_curves": len(ref_curves),
        "own_grpo_curves": len(own),
        "stored": stored["verdict_per_arm"],
        "matches": {a: per[a]["verdict"] for a in arms} == stored["verdict_per_arm"],
        "speedup_map": {
            k: v for k, v in speedup_map(ref_curves, delta).items() if k not in ("grid", "gains")
        },
        "secondary": secondary_family(results["runs"], arms),
    }
    runs = folder / "runs"
    if "grpo-passk" in arms and dc.group_logs(runs, "grpo-passk"):
        out["zero_signal"] = {a: zero_signal(runs, a) for a in ("grpo", "grpo-passk")}
    if "darling" in arms and dc.group_logs(runs, "darling"):
        out["darling"] = {**darling_replay(runs), **darling_normalisation()}
    return out


def wordadd_verdicts(results: dict[str, Any]) -> dict[str, Any]:
    stored = results["decision"]
    got = dc.wordadd_decision(
        results["runs"],
        arms=stored["arms"],
        control=stored["control"],
        base=stored.get("base", "grpo"),
    )
    return {
        "kind": "wordadd rule (decision.WORDADD_RULE)",
        "arms": stored["arms"],
        "verdicts": got["verdict_per_arm"],
        "reason": got.get("reason"),
        "seeds": got["seeds"],
        "runs": len(results["runs"]),
        "stored": stored["verdict_per_arm"],
        "matches": got["verdict_per_arm"] == stored["verdict_per_arm"],
    }


def control_verdicts(results: dict[str, Any]) -> dict[str, Any]:
    """picktwo's positive control (control.control_decision, as PREREGISTRATION.md fixes it):
    the calibration, what it decides about the picktwo refutations, H2 and MMR's area."""
    from .control import control_decision

    stored = results["decision"]
    got = control_decision(
        results["runs"], delta_2x=stored["delta_2x"], min_seeds=stored["min_seeds"]
    )
    matches = got["summary"] == stored["summary"]
    return {
        "kind": "positive control (reweighter_research.control, pre-registered)",
        "summary": got["summary"],
        "matches": matches,
        "note": f"{got['summary']}; matches results.json: {str(matches).lower()}",
    }


def ratio_verdicts(results: dict[str, Any]) -> dict[str, Any]:
    """pickone's step-ratio rule (metrics.RULE), and the area reading of issue 31 beside it."""
    stored = results["decision"]
    base, arm = stored.get("arms", ["grpo", "mmr"])
    got = dc.decision(results["runs"], base=base, arm=arm)
    out: dict[str, Any] = {
        "kind": "step-ratio rule (metrics.RULE)",
        "arms": [arm],
        "verdict": got["verdict"],
        "informative_seeds": got["informative_seeds"],
        "stored": stored["verdict"],
        "matches": got["verdict"] == stored["verdict"],
    }
    by = {(r["method"], r["seed"]): r["accuracy_curve"] for r in results["runs"]}
    seeds = sorted(s for m, s in by if m == base and (arm, s) in by)
    if len(seeds) >= 2:
        d = [dc.area(by[(arm, s)]) - dc.area(by[(base, s)]) for s in seeds]
        m, se, lo, hi = dc.t_interval(d, 0.95)
        delta = dc.delta_for_speedup([by[(base, s)] for s in seeds])
        out["area"] = {
            "n": len(seeds),
            "mean": m,
            "se": se,
            "ci95": [lo, hi],
            "delta_2x": delta,
            "reading": (
                "speeds up"
                if lo > 0
                else "refuted"
                if hi < delta
                else "no evidence of a 2x speed-up, and a 2x speed-up not excluded"
                if lo <= 0 <= hi
                else "inconclusive"
            ),
        }
    else:
        out["note"] = (
            f"{len(seeds)} seeds with both {base} and {arm}: the stored decision "
            "does not recompute from this folder's runs"
        )
    return out


def pilot_verdicts(folder: Path, results: dict[str, Any]) -> dict[str, Any]:
    """picktwo's pilot (rule items 3 and 7): saturated (last-10 mean over seeds > 0.85: halve
    the learning rate), not learning (last 10 - first 5 < 0.10: double it), else it fixes
    delta_2x, the overdispersion and the threshold."""
    curves = grpo_curves(results)
    first = float(np.mean([np.mean(c[:5]) for c in curves]))
    last = float(np.mean([np.mean(c[-WINDOW:]) for c in curves]))
    verdict = (
        "saturated: halve the learning rate"
        if last > 0.85
        else "did not learn: double the learning rate"
        if last - first < 0.10
        else "fixes delta_2x, phi and the threshold"
    )
    out = {
        "kind": "pilot (picktwo rule items 3 and 7)",
        "verdict": verdict,
        "learning_rate": results["task"].get("learning_rate"),
        "seeds": len(curves),
        "first5": first,
        "last10": last,
        "threshold": (first + last) / 2,
        "delta_2x": dc.delta_for_speedup(curves),
        "phi": float(np.nanmean([dc.overdispersion(c, dc.GROUP) for c in curves])),
    }
    stored = _load(folder / "pilot.json")
    if stored:
        out["delta_2x_stored"] = stored.get("delta_2x")
    return out


def gate_verdicts(path: Path) -> dict[str, Any]:
    """The gate (gate.summarise) over its committed per-prompt records (no model)."""
    g = json.loads(path.read_text())
    band = tuple(g.get("band") or BANDS[g.get("task", "picktwo")])
    got = summarise(g["per_prompt"], band)
    out = {
        "kind": "gate (gate.summarise)",
        "file": path.name,
        "passed": got["passed"],
        "accuracy": got["accuracy"],
        "accuracy_ci95": got["accuracy_ci95"],
        "band": list(band),
        "accuracy_in_band": got["accuracy_in_band"],
        "embedder_sees_diversity": got["embedder_sees_diversity"],
        "stored": g["passed"],
        "matches": got["passed"] == g["passed"],
    }
    for k in ("similarity_gap_ci95", "mean_similarity_correct_ci95"):
        if got.get(k) is not None:
            out[k] = got[k]
    return out


def groups_gap_verdicts(path: Path) -> dict[str, Any]:
    """The embedder condition re-measured on logged groups: recomputed where the file keeps
    each group's correct-pair cosines (wordadd), else as stored (re-embedding needs MiniLM:
    `python -m reweighter_research.gate --groups ...` writes it)."""
    g = json.loads(path.read_text())
    if "per_group" in g:
        got = correct_similarity(
            [{"correct": x["correct"], "cos_correct": x["cos_correct"]} for x in g["per_group"]]
        )
        return {
            "kind": "embedder condition (gate.correct_similarity)",
            "recomputed": True,
            "correct_pairs": got["correct_pairs"],
            "mean_similarity_correct": got["mean_similarity_correct"],
            "ci95": got["mean_similarity_correct_ci95"],
            "correct_paths_distinct": got["correct_paths_distinct"],
            "matches": got["correct_paths_distinct"] == g["correct_paths_distinct"],
        }
    return {
        "kind": "embedder condition (gate.summarise, as stored)",
        "recomputed": False,
        "similarity_gap": g.get("similarity_gap"),
        "ci95": g.get("similarity_gap_ci95"),
        "embedder_sees_diversity": g.get("embedder_sees_diversity"),
    }


def verdicts(folder: Path | str) -> list[dict[str, Any]]:
    """Every verdict the files of one experiment folder carry, recomputed (see the module)."""
    folder = Path(folder)
    out: list[dict[str, Any]] = []
    results = _load(folder / "results.json")
    stored = (results or {}).get("decision")
    runs = (results or {}).get("runs")
    if isinstance(stored, dict) and isinstance(runs, list):
        if "calibration" in stored:
            out.append(control_verdicts(results))
        elif "control" in stored:
            out.append(wordadd_verdicts(results))
        elif "verdict_per_arm" in stored:
            out.append(area_verdicts(folder, results))
        elif "verdict" in stored and {r["method"] for r in runs} == {"grpo"}:
            out.append(
                {
                    "kind": "no verdict of its own",
                    "note": (
                        f"only grpo runs; results.json's decision ({stored['verdict']}) came with "
                        "them from the folder they were copied from and does not recompute here"
                    ),
                }
            )
            if (folder / "pilot.json").is_file():
                out.append(pilot_verdicts(folder, results))
        elif "verdict" in stored:
            out.append(ratio_verdicts(results))
        else:
            out.append(
                {
                    "kind": "not a training rule",
                    "note": (
                        "results.json's decision is of another kind (rule: "
                        f"{str(stored.get('rule', '?'))[:80]}); not recomputed here"
                    ),
                }
            )
    elif (
        isinstance(runs, list)
        and runs
        and {r["method"] for r in runs} == {"grpo"}
        and (folder / "pilot.json").is_file()
    ):
        out.append(pilot_verdicts(folder, results))
    for gate in sorted(folder.rglob("gate.json")):
        if "per_prompt" in json.loads(gate.read_text()):
            out.append({**gate_verdicts(gate), "file": str(gate.relative_to(folder))})
    if (folder / "groups_gap.json").is_file():
        out.append(groups_gap_verdicts(folder / "groups_gap.json"))
    prereg = [f for f in ("PREREGISTRATION.md", "PREREGISTERED") if (folder / f).is_file()]
    if not out and prereg and results is None:
        out.append(
            {
                "kind": "pre-registered, no data",
                "note": f"not run: {' and '.join(prereg)} here, no results.json: no verdict",
            }
        )
    if not out:
        out.append(
            {
                "kind": "none",
                "note": "no pre-registered rule in this folder's files "
                "(descriptive runs, or a decision of another kind): no verdict to print",
            }
        )
    for v in out:
        v["folder"] = folder.name
    return out


MARKERS = (
    "results.json",
    "gate.json",
    "groups_gap.json",
    "pilot.json",
    "PREREGISTERED",
    "PREREGISTRATION.md",
    "runs",
)
"""What makes a folder an experiment's (any one of them) rather than a folder of experiments."""


def folders(path: Path | str) -> list[Path]:
    """`path` itself when it is an experiment folder (it holds one of MARKERS, or no folder),
    else its subfolders (experiments/)."""
    path = Path(path)
    subs = sorted(p for p in path.iterdir() if p.is_dir())
    if any((path / f).exists() for f in MARKERS) or not subs:
        return [path]
    return subs


# --- text ------------------------------------------------------------------------------------


def _f(x: float | None, places: int = 3, sign: bool = False) -> str:
    return "-" if x is None else f"{x:+.{places}f}" if sign else f"{x:.{places}f}"


def _x(x: float | None) -> str:
    return "none" if x is None else f"{x:.2f}x"


def render(v: dict[str, Any]) -> list[str]:
    """One verdict as text lines (figures to 3 places; delta_2x and p values to more)."""
    head = f"== {v['folder']}: {v['kind']}"
    lines = [head]
    if "per_arm" in v:
        lines.append(
            f"delta_2x {v['delta_2x']:.6f} (from the {v['reference_curves']} GRPO "
            f"curves of {v['reference']}; stored {v['delta_2x_stored']:.6f})"
        )
        for arm, a in v["per_arm"].items():
            lo, hi = a["interval"]
            lines.append(
                f"{arm}: {a['verdict']} | mean {_f(a['mean'], sign=True)}, "
                f"{100 * a['level']:.2f} % interval {_f(lo, sign=True)} to {_f(hi, sign=True)}, "
                f"n {a['n']}, p {a['p']:.3f} unadjusted | power at its paired sd "
                f"{a['sd']:.3f}: {a['power_at_sd']:.3f} | excludes speed-ups from "
                f"{_x(a['excluded_from_reference'])} ({v['reference']} curves), "
                f"{_x(a['excluded_from_own_grpo'])} (this run's {v['own_grpo_curves']} GRPO "
                "curves), post hoc"
            )
        m = v["speedup_map"]
        lines.append(
            f"gain -> speed-up map ({v['reference']} curves): a {_x(m['first_reaching'])}"
            f" speed-up already predicts {m['gain_at_first']:.4f} >= delta_2x; "
            f"{m['down_steps']} of {m['steps']} grid steps go down"
        )
        lines.append("matches results.json: " + str(v["matches"]).lower())
        for s in v["secondary"]:
            lo, hi = s["ci95"]
            lines.append(
                f"secondary {s['arm']} {s['metric']}: {_f(s['mean'], sign=True)} "
                f"(95 % {_f(lo, sign=True)} to {_f(hi, sign=True)}), p {s['p']:.4f}, "
                f"Bonferroni x{s['family']} {s['p_bonferroni']:.3f}"
                + (" survives" if s["survives"] else "")
            )
        for arm, z in v.get("zero_signal", {}).items():
            lines.append(
                f"zero-signal groups {arm}: {z['zero']} of {z['groups']} "
                f"({100 * z['zero'] / z['groups']:.0f} %)"
            )
        if "darling" in v:
            d = v["darling"]
            lines.append(
                f"darling arm: logged rewards vs the pre-fix rule (no answer: a class of its "
                f"own) max deviation {d['max_dev_prefix_rule']:.3g}, vs the shipped rule "
                f"{d['max_dev_shipped_rule']:.3g}, over {d['groups']} groups; std "
                f"normalisation {'on' if d['std_normalised'] else 'off'} (scale_rewards "
                f"{d['arm_scale_rewards'] or d['trl_default']!r}; the paper turns it off)"
            )
    elif "verdicts" in v:
        for arm, verdict in v["verdicts"].items():
            lines.append(
                f"{arm}: {verdict} ({v['reason'] or 'gates passed'}; "
                f"{v['runs']} runs in results.json)"
            )
        lines.append("matches results.json: " + str(v["matches"]).lower())
    elif "informative_seeds" in v:
        lines.append(
            f"{v['arms'][0]}: {v['verdict']} ({v['informative_seeds']} informative "
            f"seeds; stored {v['stored']}; matches results.json: "
            f"{str(v['matches']).lower()})"
        )
        if "area" in v:
            a = v["area"]
            lo, hi = a["ci95"]
            lines.append(
                f"area read again: {a['reading']}: mean {_f(a['mean'], sign=True)} "
                f"(standard error {a['se']:.3f}, 95 % {_f(lo, sign=True)} to "
                f"{_f(hi, sign=True)}) against {_f(a['delta_2x'], sign=True)} a 2x "
                "speed-up predicts"
            )
        if "note" in v:
            lines.append(v["note"])
    elif v["kind"].startswith("pilot"):
        lines.append(
            f"{v['verdict']} (learning rate {v['learning_rate']}, {v['seeds']} seeds: "
            f"first 5 steps {v['first5']:.3f}, last 10 {v['last10']:.3f}; delta_2x "
            f"{v['delta_2x']:.6f}, phi {v['phi']:.2f}, threshold {v['threshold']:.3f})"
        )
    elif v["kind"].startswith("gate"):
        lo, hi = v["accuracy_ci95"]
        extra = "".join(
            f", {k} {v[k][0]:.3f} to {v[k][1]:.3f}"
            for k in ("similarity_gap_ci95", "mean_similarity_correct_ci95")
            if k in v
        )
        lines.append(
            f"{v['file']}: {'passed' if v['passed'] else 'FAILED'} (accuracy "
            f"{v['accuracy']:.3f}, 95 % {lo:.3f} to {hi:.3f}, band {v['band'][0]} to "
            f"{v['band'][1]}{extra}; matches gate.json: {str(v['matches']).lower()})"
        )
    elif v["kind"].startswith("embedder"):
        lo, hi = v["ci95"]
        if v["recomputed"]:
            lines.append(
                f"mean cosine among correct completions {v['mean_similarity_correct']:.3f}"
                f" (95 % {lo:.3f} to {hi:.3f}, {v['correct_pairs']} pairs): correct "
                f"paths {'distinct' if v['correct_paths_distinct'] else 'not distinct'}"
                f" by the gate's bar; matches groups_gap.json: "
                f"{str(v['matches']).lower()}"
            )
        else:
            lines.append(
                f"within-prompt gap {v['similarity_gap']:+.3f} (95 % {lo:+.3f} to "
                f"{hi:+.3f}), as stored in groups_gap.json (not re-embedded here)"
            )
    else:
        lines.append(v["note"])
    return lines


def main(paths: Sequence[str]) -> int:
    """Print every verdict of each folder (an experiment folder, or experiments/ for all)."""
    for p in paths:
        for folder in folders(p):
            for v in verdicts(folder):
                print("\n".join(render(v)))
    return 0
