"""README's experiment line says what EXPERIMENTS.md says, and its numbers are the data's.

The line is the one place most readers meet the experiments; it must not drift from the write-up
or from the per-step logs. The numbers are recomputed here from results.json with numpy alone
(not through decision.py, which wrote the write-up's figures).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
PICKONE = REPO / "experiments" / "pickone-6seed" / "results.json"
PICKTWO = REPO / "experiments" / "picktwo-main" / "results.json"


def readme_line() -> str:
    """The one-line summary of the experiments: EXPERIMENTS.md's opening paragraph (it was
    README's, whose Results section now links it; the figures in full follow it)."""
    lines = [ln for ln in (REPO / "EXPERIMENTS.md").read_text().splitlines()
             if ln.startswith("Experiments, read narrowly:")]
    assert len(lines) == 1, "EXPERIMENTS.md opens with one summary line of the experiments"
    return lines[0]


def results_table() -> list[tuple[str, str, str]]:
    """README's Results table: (experiment, verdict, command) per row."""
    text = (REPO / "README.md").read_text().split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for ln in text.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2].startswith("`python -m"):
            rows.append((cells[0], cells[1], cells[2].strip("`")))
    return rows


def lead() -> str:
    """EXPERIMENTS.md up to its first pickone run section: the reading it leads with."""
    text = (REPO / "EXPERIMENTS.md").read_text()
    return text.split("\n## pickone (2026-11-25)", 1)[0]


def numbers(text: str) -> list[str]:
    return re.findall(r"[+-]?\d+\.\d+", text)


def pickone_area() -> tuple[float, float, float]:
    """(mean, standard error) of the paired MMR - GRPO mean training accuracy, and the mean
    gain a 0.52-compressed GRPO curve predicts (linear between steps, last-10 mean after)."""
    runs = json.loads(PICKONE.read_text())["runs"]
    by = {(r["method"], r["seed"]): np.asarray(r["accuracy_curve"]) for r in runs}
    seeds = sorted(s for m, s in by if m == "grpo")
    d = np.array([by["mmr", s].mean() - by["grpo", s].mean() for s in seeds])
    gains = []
    for s in seeds:
        c = by["grpo", s]
        n = len(c)
        x = np.arange(1, n + 1) / 0.52
        fast = np.where(x <= n, np.interp(x, np.arange(1, n + 1), c), c[-10:].mean())
        gains.append(fast.mean() - c.mean())
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d))), float(np.mean(gains))


def test_readme_line_quotes_only_what_experiments_md_leads_with() -> None:
    line, head = readme_line(), lead()
    table = {exp.split(":")[0]: verdict for exp, verdict, _ in results_table()}
    assert "no evidence of a 2x speed-up" in table["pickone"]
    assert "2x speed-up not excluded" in table["pickone"]
    for phrase in ("no evidence of a 2x speed-up", "2x speed-up not excluded"):
        assert phrase in head.lower().replace("**", "")
    verdicts = json.loads(PICKTWO.read_text())["decision"]["verdict_per_arm"]
    if set(verdicts.values()) == {"refuted"}:  # the table's word is the file's, for every arm
        assert table["picktwo"] == "refuted for every arm"
        assert "**Refuted for every arm" in head
    # issue 40: the scope travels with the verdict; issue 49: and what "refuted" excludes
    assert "nothing here tests the papers' regime" in line
    assert "so it does not pin a 2x speed-up" in line
    missing = [x for x in numbers(line) if x.lstrip("+") not in head]
    assert not missing, f"README quotes {missing}, which EXPERIMENTS.md's lead does not"


def test_readme_numbers_recompute_from_the_per_step_logs() -> None:
    mean, se, delta = pickone_area()
    head = lead()
    assert f"**{mean:+.3f}** (standard error {se:.3f}" in head
    assert f"predicts **{delta:+.3f}**" in head
    # and the claim itself: the interval holds both no effect and the 2x prediction
    from scipy import stats

    q = stats.t.ppf(0.975, 5)
    assert mean - q * se < 0 < delta < mean + q * se


def test_readme_picktwo_figures_recompute_from_the_curves() -> None:
    """The picktwo figures, from results.json with numpy and scipy: each arm's mean area
    difference to GRPO and its 98.75 % interval (4 arms) in EXPERIMENTS.md's table, under
    delta_2x and holding 0; README's delta_2x and the distinct-answer gains it quotes."""
    from scipy import stats

    results = json.loads(PICKTWO.read_text())
    runs = {(r["method"], r["seed"]): r for r in results["runs"]}
    seeds = sorted(s for m, s in runs if m == "grpo")
    assert len(seeds) == 12
    delta = results["decision"]["delta_2x"]
    line, head = readme_line(), lead()
    assert f"excludes a learning-curve gain of +{delta:.4f}" in line
    q = stats.t.ppf(1 - 0.05 / 4 / 2, len(seeds) - 1)
    for arm in ("mmr", "dra", "darling", "grpo-passk"):
        d = np.array([np.mean(runs[arm, s]["accuracy_curve"]) - np.mean(runs["grpo", s][
            "accuracy_curve"]) for s in seeds])
        se = d.std(ddof=1) / np.sqrt(len(d))
        lo, hi = d.mean() - q * se, d.mean() + q * se
        assert f"| {d.mean():+.3f} | {lo:+.3f} to {hi:+.3f} | refuted |" in head, arm
        assert lo < 0 < hi < delta
    gains = [np.mean([runs[arm, s]["distinct_correct"] - runs["grpo", s]["distinct_correct"]
                      for s in seeds]) for arm in ("mmr", "darling")]
    assert f"MMR +{gains[0]:.2f}, Darling +{gains[1]:.2f}" in line
    # the larger-scale run: MMR's mean difference and that run's own delta_2x
    scale = json.loads((REPO / "experiments" / "picktwo-scale" / "results.json").read_text())
    by = {(r["method"], r["seed"]): np.mean(r["accuracy_curve"]) for r in scale["runs"]}
    d = np.array([by["mmr", s] - by["grpo", s] for m, s in by if m == "grpo"])
    assert len(d) == 16 and scale["decision"]["verdict_per_arm"] == {"mmr": "refuted"}
    flat = " ".join(head.split())
    assert f"MMR - GRPO area: mean **{d.mean():+.3f}, 95 % interval" in flat
    assert f"**+{scale['decision']['delta_2x']:.3f}**" in flat


@pytest.mark.parametrize("figure", ["-0.057", "+0.105", "1.06", "1.76", "0.92", "1.15", "1.02"])
def test_the_leads_audit_figures_are_the_audits(figure: str) -> None:
    """EXPERIMENTS.md's audit figures, as decision.audit_pickone computes them from the file."""
    from reweighter_research.decision import audit_dir

    a = audit_dir(PICKONE.parent)
    got = {
        "-0.057": a["area_diff"]["ci95"][0], "+0.105": a["area_diff"]["ci95"][1],
        "1.06": a["swapped_roles"]["median_ratio"],
        "1.76": a["swapped_roles"]["median_ratio_grpo_informative_seeds"],
        "0.92": a["median_ratio_by_target_se"]["0"], "1.15": a["median_ratio_by_target_se"]["1"],
        "1.02": a["median_ratio_by_target_se"]["2"],
    }[figure]
    places = len(figure.split(".")[1])
    assert f"{got:+.{places}f}".lstrip("+") == figure.lstrip("+") and figure in lead()
    assert a["first_rule_verdict"] == "inconclusive" and a["verdict"] == "refuted"
    assert a["mmr_groups"] == {"groups": 240, "all_rewards_equal": 101, "left_unchanged": 101}


def test_the_audit_command_as_written() -> None:
    """EXPERIMENTS.md's `python -m reweighter_research.decision --audit experiments/pickone-6seed`,
    in a fresh process: the JSON it prints holds the lead's figures."""
    import subprocess
    import sys

    cmd = "python -m reweighter_research.decision --audit experiments/pickone-6seed"
    assert cmd in (REPO / "EXPERIMENTS.md").read_text()
    proc = subprocess.run([sys.executable, *cmd.split()[1:]], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    a = json.loads(proc.stdout)
    assert round(a["area_diff"]["mean"], 3) == 0.024 and round(a["delta_2x"], 3) == 0.091


@pytest.mark.process
def test_the_pilot_command_on_the_provisional_curves(tmp_path: Path) -> None:
    """`decision --pilot DIR N --paired-sd SD` (EXPERIMENTS.md's provisional table, with 1000
    experiments a row there; 40 here to stay quick): pilot.json and the printed table."""
    import shutil
    import subprocess
    import sys

    shutil.copy(REPO / "experiments/picktwo-provisional/results.json", tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "reweighter_research.decision", "--pilot", str(tmp_path), "40",
         "--paired-sd", "0.0772"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    got = json.loads((tmp_path / "pilot.json").read_text())
    committed = json.loads((REPO / "experiments/picktwo-provisional/pilot.json").read_text())
    for key in ("delta_2x", "phi", "tau", "tau_paired", "last10_mean"):
        assert got[key] == pytest.approx(committed[key]), key
    # 2 taus x 4 arm counts (POWER_ARMS) x 4 seed counts, after the header
    assert len(got["power"]) == 32 and proc.stdout.count("\n| ") == 32
