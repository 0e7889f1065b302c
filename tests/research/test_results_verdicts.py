"""results.json of the area-rule experiments (issue 31, item 6): every run carries method, seed
and its per-step `accuracy_curve`; `decision` carries verdict_per_arm, delta_2x, the intervals,
the power table and preregistered_commit; and the verdicts recompute from the curves in the
file by the rule as EXPERIMENTS.md states it, with numpy and scipy alone (not decision.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

REPO = Path(__file__).resolve().parents[2]


def recompute(results: dict) -> dict[str, str]:
    """The rule from EXPERIMENTS.md ("The pre-registered rule", items 5-7), from the file."""
    d = results["decision"]
    delta = d["delta_2x"]
    delta = float("nan") if delta is None else float(delta)
    curves = {(r["method"], r["seed"]): np.asarray(r["accuracy_curve"], float)
              for r in results["runs"]}
    arms = list(d["verdict_per_arm"])
    out = {}
    for arm in arms:
        seeds = sorted(s for m, s in curves if m == "grpo" and (arm, s) in curves)
        diffs = np.array([curves[arm, s].mean() - curves["grpo", s].mean() for s in seeds])
        if len(diffs) < 2:
            out[arm] = "inconclusive"
            continue
        q = stats.t.ppf(1 - 0.05 / len(arms) / 2, len(diffs) - 1)
        se = diffs.std(ddof=1) / np.sqrt(len(diffs))
        lo, hi = diffs.mean() - q * se, diffs.mean() + q * se
        out[arm] = "speeds up" if lo > 0 else "refuted" if hi < delta else "inconclusive"
    return out


def check_shape(results: dict) -> None:
    for r in results["runs"]:
        assert {"method", "seed", "accuracy_curve"} <= set(r)
        assert len(r["accuracy_curve"]) == r["steps"]
    d = results["decision"]
    assert {"verdict_per_arm", "delta_2x", "intervals", "power", "preregistered_commit"} <= set(d)


def area_experiments() -> list[Path]:
    """picktwo's area-rule experiments (wordadd's rule, with its gates and control, has its own
    recomputation in test_wordadd.py)."""
    return sorted(p for p in REPO.glob("experiments/*/results.json")
                  if "verdict_per_arm" in (d := json.loads(p.read_text()).get("decision", {}))
                  and "control" not in d)


@pytest.mark.parametrize("path", area_experiments(), ids=lambda p: p.parent.name)
def test_committed_verdicts_recompute_from_the_curves(path: Path) -> None:
    results = json.loads(path.read_text())
    check_shape(results)
    assert recompute(results) == results["decision"]["verdict_per_arm"]
    commit = results["decision"]["preregistered_commit"]
    if results["decision"].get("pilot"):  # a main run: the rule was committed before the data
        added = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%H", "--", str(path.parent / "runs")],
            capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
        first_data = added[-1] if added else "HEAD"
        anc = subprocess.run(["git", "merge-base", "--is-ancestor", commit, f"{first_data}~1"],
                             cwd=REPO)
        assert anc.returncode == 0, f"{commit} is not strictly before {first_data}"


@pytest.mark.process
def test_collect_writes_the_shape_and_verdicts_that_recompute(tmp_path: Path) -> None:
    """Synthetic runs through the real collect path: GRPO at 0.3; MMR clearly above it (speeds
    up), DRA level with it and tight (refuted: its upper bound is under delta_2x)."""
    from reweighter_research.experiment import main

    (tmp_path / "runs").mkdir()
    rng = np.random.default_rng(0)
    for s in range(8):
        for m, shift in (("grpo", 0.0), ("mmr", 0.12), ("dra", 0.0)):
            curve = np.clip(0.3 + shift + 0.005 * rng.standard_normal(20), 0, 1).tolist()
            entry = {"method": m, "seed": s, "steps": 20, "accuracy_curve": curve,
                     "reward_curve": curve, "steps_to_target": None, "accuracy": 0.5,
                     "pass_at_k": 0.8, "distinct_correct": 1.0, "mean_pairwise_similarity": 0.7,
                     "reweight_share": 0.01, "similarity_curve": [0.8] * 20}
            (tmp_path / "runs" / f"{m}-{s}.json").write_text(json.dumps(entry))
    pilot = tmp_path / "pilot.json"
    pilot.write_text(json.dumps({"delta_2x": 0.08, "power": [{"seeds": 8, "power_2x": 0.9}]}))
    config = REPO / "research" / "configs" / "smollm2-picktwo.yaml"
    argv = ["--config", str(config), "--out", str(tmp_path), "--methods", "grpo,mmr,dra",
            "--seeds", ",".join(map(str, range(8))), "--collect-only", "--pilot", str(pilot),
            "--preregistered", "abc123", "--no-dra-offline"]
    assert main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    check_shape(results)
    assert results["decision"]["verdict_per_arm"] == {"mmr": "speeds up", "dra": "refuted"}
    assert recompute(results) == results["decision"]["verdict_per_arm"]
    assert results["decision"]["preregistered_commit"] == "abc123"
    assert results["decision"]["intervals"]["mmr"]["level"] == pytest.approx(0.975)
