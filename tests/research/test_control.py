"""issue 49, item 5: picktwo's calibrated positive control, pre-registered before any data.

The code (reweighter_research.control, bench/gpu/gpu_control.sh) holds the pre-registration's
numbers; the rule says what the document says on runs built to pass and to fail each condition;
the pre-registration's commit precedes any of the control's data; the committed folder, with no
run in it, reads "not run: no GPU lent"; and a toy-size CPU run goes through the experiment
runner and the rule end to end (slow)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats  # noqa: F401  (the rule's t tests: imported once, at collection)

from reweighter_research import control
from reweighter_research.decision import compressed
from reweighter_research.experiment import ARM_LR_SCALE, ARMS, arm_raw

REPO = Path(__file__).resolve().parents[2]
PREREG = REPO / "experiments" / "picktwo-control" / "PREREGISTRATION.md"


def test_the_code_holds_the_preregistrations_numbers() -> None:
    text = PREREG.read_text()
    assert "**300, 301, ..., 311**" in text and tuple(range(300, 312)) == control.SEEDS
    assert "**98.75 %**" in text and pytest.approx(0.9875) == 1 - 0.05 / control.FAMILY
    assert "delta_2x = 0.047558" in text and round(control.DELTA_2X, 6) == 0.047558
    assert "alpha = 0.05" in text and control.ALPHA == 0.05
    assert "at least 10 of the\n12" in text and control.MIN_SEEDS == 10
    assert "grpo, grpo-2xlr, grpo-1.3xlr, mmr" in text
    assert control.ARMS == ("grpo", "grpo-2xlr", "grpo-1.3xlr", "mmr")
    # the arms' learning rates: 5e-6, 1e-5, 6.5e-6, 5e-6
    import yaml

    raw = yaml.safe_load((REPO / control.CONFIG).read_text())
    assert raw["learning_rate"] == 5e-6 and raw["max_steps"] == control.STEPS == 50
    lrs = {
        a: arm_raw(raw, a, "http://x").get("learning_rate", raw["learning_rate"])
        for a in control.ARMS
    }
    assert lrs == pytest.approx(
        {"grpo": 5e-6, "grpo-2xlr": 1e-5, "grpo-1.3xlr": 6.5e-6, "mmr": 5e-6}
    )
    assert ARM_LR_SCALE["grpo-1.3xlr"] == 1.3 and ARMS["grpo-1.3xlr"] == ARMS["grpo"]
    # pilot 2's delta_2x, the constant picktwo-main's verdicts used
    import json

    pilot = json.loads((control.PILOT / "pilot.json").read_text())
    assert pilot["delta_2x"] == control.DELTA_2X


def test_the_device_script_runs_the_preregistered_arms_seeds_and_rule() -> None:
    script = (REPO / "bench" / "gpu" / "gpu_control.sh").read_text()

    def setting(name: str) -> str:
        found = re.search(rf"^export {name}=(?:\$\{{{name}:-)?([^}}\s]+)", script, re.M)
        assert found, name
        return found.group(1)

    assert setting("GX_METHODS") == ",".join(control.ARMS)
    assert setting("GX_SEEDS") == ",".join(map(str, control.SEEDS))
    assert setting("GX_STEPS") == str(control.STEPS)
    assert setting("GX_EVAL") == str(control.EVAL_PROMPTS)
    assert setting("GX_CONFIG") == control.CONFIG
    assert "GX_RULE=control" in script and "GX_PILOT=none" in script
    assert int(setting("GX_LIMIT")) <= 470  # the call's timeout_s 540: nine minutes
    assert "exec bash bench/gpu/gpu_experiment.sh run" in script


def test_the_preregistration_precedes_any_of_its_data() -> None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()

    prereg = (PREREG.parent / "PREREGISTERED").read_text().strip()
    first = git("log", "--diff-filter=A", "--format=%H", "--", str(PREREG)).splitlines()[-1]
    assert first == prereg
    # the pre-registration commit added that one file, nothing else
    assert git("show", "--name-only", "--format=", prereg) == (
        "experiments/picktwo-control/PREREGISTRATION.md"
    )
    data = git(
        "log",
        "--diff-filter=A",
        "--format=%H",
        "--",
        "experiments/picktwo-control/runs",
        "experiments/picktwo-control/results.json",
    )
    for commit in data.splitlines():  # every commit that added data descends from it
        assert (
            subprocess.run(
                ["git", "merge-base", "--is-ancestor", prereg, commit], cwd=REPO
            ).returncode
            == 0
            and commit != prereg
        )


def _runs(
    rng: np.random.Generator,
    near_speed: float,
    fast_speed: float = 2.0,
    seeds: range = range(300, 312),
    mmr_lead: float = 0.3,
) -> list[dict]:
    """Synthetic runs: GRPO a noisy ramp per seed, each other arm its seed's ramp compressed in
    time by its speed (decision.compressed), with per-step noise; MMR at GRPO's speed."""
    runs = []
    for s in seeds:
        t = np.arange(1, 51)
        ramp = np.clip(0.05 + 0.7 * (1 - np.exp(-t / (12 + rng.normal(0, 2)))), 0, 1)
        for arm, speed in (
            ("grpo", 1.0),
            ("grpo-2xlr", fast_speed),
            ("grpo-1.3xlr", near_speed),
            ("mmr", 1.0),
        ):
            curve = compressed(ramp.tolist(), 1 / speed) if speed != 1.0 else ramp.tolist()
            curve = np.clip(np.asarray(curve) + rng.normal(0, 0.02, 50), 0, 1).tolist()
            distinct = 2.5 + (mmr_lead + rng.normal(0, 0.1) if arm == "mmr" else 0.0)
            runs.append(
                {
                    "method": arm,
                    "seed": s,
                    "accuracy_curve": curve,
                    "distinct_correct": distinct,
                    "accuracy": 0.7,
                    "sample_accuracy": 0.6,
                    "pass_at_k": 0.9,
                }
            )
    return runs


def test_the_rule_calibrates_when_2x_speeds_up_and_1_3x_is_not_refuted() -> None:
    d = control.control_decision(_runs(np.random.default_rng(0), near_speed=1.5), reference=[])
    cal = d["calibration"]
    assert cal["decided"] and cal["seeds"] == list(range(300, 312))
    assert cal["grpo-2xlr"]["verdict"] == "speeds up"
    assert cal["grpo-1.3xlr"]["verdict"] != "refuted"
    assert cal["grpo-2xlr"]["level"] == pytest.approx(0.9875)
    assert cal["passed"] and d["picktwo_refutations"] == "stand: calibrated"
    assert d["H2_distinct_correct"]["verdict"] == "confirmed"
    assert d["H2_distinct_correct"]["p_one_sided"] < 0.05
    assert d["mmr_area"]["verdict"] in ("refuted", "inconclusive")


def test_a_refuted_near_arm_or_an_undetected_2x_withdraws_every_refutation() -> None:
    # 1.3x learning "as fast as GRPO": its interval lies below delta_2x: refuted -> withdrawn
    d = control.control_decision(_runs(np.random.default_rng(1), near_speed=1.0), reference=[])
    assert d["calibration"]["grpo-1.3xlr"]["verdict"] == "refuted"
    assert not d["calibration"]["passed"]
    assert d["picktwo_refutations"].startswith("withdrawn")
    # the 2x arm no faster than GRPO: C1 fails -> withdrawn, whatever 1.3x does
    d = control.control_decision(
        _runs(np.random.default_rng(2), near_speed=1.5, fast_speed=1.0), reference=[]
    )
    assert not d["calibration"]["C1_2x_speeds_up"]
    assert d["picktwo_refutations"].startswith("withdrawn")
    # no MMR lead: H2 not confirmed
    d = control.control_decision(_runs(np.random.default_rng(3), 1.5, mmr_lead=-0.1), reference=[])
    assert d["H2_distinct_correct"]["verdict"] == "not confirmed"


def test_fewer_than_ten_complete_seeds_decide_nothing() -> None:
    runs = _runs(np.random.default_rng(4), 1.5, seeds=range(300, 309))
    d = control.control_decision(runs, reference=[])
    assert not d["calibration"]["decided"] and not d["H2_distinct_correct"]["decided"]
    assert d["picktwo_refutations"].startswith("not decided")
    # a seed missing from one calibration arm is left out of the calibration, not of H2
    runs = [
        r
        for r in _runs(np.random.default_rng(5), 1.5)
        if not (r["method"] == "grpo-1.3xlr" and r["seed"] == 311)
    ]
    d = control.control_decision(runs, reference=[])
    assert d["calibration"]["seeds"] == list(range(300, 311))
    assert d["H2_distinct_correct"]["seeds"] == list(range(300, 312))


def test_the_committed_folder_says_not_run() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "reweighter_research.control", "--decide", str(control.FOLDER)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    if not control.runs_of(control.FOLDER):
        assert f"{control.NOT_RUN}" in out.stdout
    else:  # once data exist: the decision line
        assert "picktwo refutations:" in out.stdout


@pytest.mark.slow  # trains 4 arms x 2 seeds x 2 steps of the tiny policy, two processes (minutes)
def test_the_cpu_dry_run_goes_through_the_runner_and_the_rule(tmp_path) -> None:
    import json

    res = control.dry_run(tmp_path)
    runs = {
        (r["method"], r["seed"]): r
        for r in json.loads((tmp_path / "results.json").read_text())["runs"]
    }
    assert set(runs) == {(a, s) for a in control.ARMS for s in control.DRY["seeds"]}
    lr = {a: runs[(a, 300)]["learning_rate"] for a in control.ARMS}
    assert lr["grpo-1.3xlr"] == pytest.approx(1.3 * lr["grpo"])
    assert lr["grpo-2xlr"] == pytest.approx(2 * lr["grpo"]) and lr["mmr"] == lr["grpo"]
    assert all(len(r["accuracy_curve"]) == control.DRY["steps"] for r in runs.values())
    # results.json's own decision keeps the pre-registered minimum: nothing decided
    assert not res["results_decision"]["calibration"]["decided"]
    assert (
        res["results_decision"]["preregistered_commit"]
        == (control.FOLDER / "PREREGISTERED").read_text().strip()
    )
    # the rule on the toy's two seeds: decided, and a verdict for each calibration arm
    toy = res["toy_decision"]
    assert toy["calibration"]["decided"] and toy["calibration"]["seeds"] == [300, 301]
    assert toy["calibration"]["grpo-2xlr"]["verdict"] in ("speeds up", "refuted", "inconclusive")
    assert toy["H2_distinct_correct"]["decided"]
    # resumable: the same command again trains nothing and rewrites the same decision
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.json")}
    again = control.dry_run(tmp_path)
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.json")} == before
    assert again["toy_decision"]["summary"] == toy["summary"]


def test_decision_verdicts_recomputes_the_controls_results(tmp_path) -> None:
    """Once the control has data, `decision --verdicts` prints its pre-registered decision
    recomputed from the runs (not 'not a training rule'), and says whether results.json agrees."""
    from reweighter_research import verdicts

    runs = _runs(np.random.default_rng(0), near_speed=1.5)
    decision = control.control_decision(runs)
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs, "decision": decision}))
    (v,) = verdicts.verdicts(tmp_path)
    assert v["kind"].startswith("positive control") and v["matches"]
    assert "calibration passed" in v["summary"] and "stand: calibrated" in v["summary"]
    decision["summary"] = "calibration FAILED"  # a results.json that disagrees is said so
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs, "decision": decision}))
    (v,) = verdicts.verdicts(tmp_path)
    assert not v["matches"] and verdicts.render(v)[-1].endswith("matches results.json: false")
