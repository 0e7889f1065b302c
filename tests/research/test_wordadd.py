"""issue 40's wordadd experiment: the positive-control arm's learning rate, the gate's
correct-path similarity, and the pre-registered rule (decision.wordadd_decision) on synthetic
runs whose verdicts are known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from reweighter_research.decision import (
    delta_for_speedup,
    excluded_from,
    wordadd_decision,
)
from reweighter_research.experiment import ARM_LR_SCALE, arm_raw
from reweighter_research.gate import SAME_PATH, correct_similarity, summarise
from reweighter_trainer.config import load_raw, parse

CONFIG = "research/configs/smollm2-wordadd.yaml"
MODEL_CONFIG = CONFIG  # its model is built in setup (tests/conftest.py)


def test_the_control_trains_at_twice_the_configs_learning_rate() -> None:
    raw = load_raw(CONFIG, [])
    base = parse(arm_raw(raw, "grpo", "http://x")).grpo["learning_rate"]
    ctrl = parse(arm_raw(raw, "grpo-2xlr", "http://x"))
    assert ARM_LR_SCALE["grpo-2xlr"] == 2.0
    assert ctrl.grpo["learning_rate"] == pytest.approx(2 * base)
    assert ctrl.reweighter.method == "none"  # GRPO: rewards unchanged
    assert parse(arm_raw(raw, "mmr", "http://x")).reweighter.params["lambda"] == "adaptive"
    assert raw["learning_rate"] == base  # the shared config is not modified
    assert base == pytest.approx(1e-5)
    # the design the issue fixes: 2 prompts x G = 8 a step, 96 tokens
    assert raw["per_device_train_batch_size"] == 16 and raw["num_generations"] == 8
    assert raw["max_completion_length"] == 96 and raw["dataset"]["name"] == "wordadd"


def test_gate_correct_paths_hand_case() -> None:
    # prompt a: 3 correct, cosines 0.5, 0.6, 0.7; prompt b: 2 correct, 0.95; c: 1 correct
    recs = [
        {"correct": [True, True, True, False], "cos_correct": [0.5, 0.6, 0.7], "same": [],
         "diff": [], "distinct": 1},
        {"correct": [True, True, False, False], "cos_correct": [0.95], "same": [], "diff": [],
         "distinct": 1},
        {"correct": [True, False, False, False], "cos_correct": [], "same": [], "diff": [],
         "distinct": 1},
        {"correct": [False] * 4, "cos_correct": [], "same": [], "diff": [], "distinct": 0},
    ]
    got = correct_similarity(recs)
    assert got["groups_with_two_correct"] == 2 and got["share_groups_two_correct"] == 0.5
    assert got["mean_similarity_correct"] == pytest.approx((0.6 + 0.95) / 2)
    assert got["share_correct_pairs_same_path"] == pytest.approx(1 / 4)  # 0.95 >= 0.9
    assert got["mean_similarity_correct_ci95"] is None  # < 3 groups: no interval, no pass
    assert got["correct_paths_distinct"] is False
    # three groups of distinct paths pass; identical-looking ones fail
    distinct = [{"correct": [True, True], "cos_correct": [c], "same": [], "diff": [],
                 "distinct": 1} for c in (0.6, 0.7, 0.65, 0.62)]
    assert summarise(distinct, (0.0, 1.0))["passed"] is True
    same = [{**r, "cos_correct": [0.97]} for r in distinct]
    out = summarise(same, (0.0, 1.0))
    assert out["passed"] is False and out["mean_similarity_correct"] > SAME_PATH


def ramp(speed: float, rng: np.random.Generator, steps: int = 40) -> list[float]:
    t = np.arange(1, steps + 1) * speed
    p = 0.15 + 0.55 * np.minimum(t / 30, 1.0)
    return (rng.binomial(16, p) / 16).tolist()


def runs(speeds: dict[str, float], seeds=range(40, 52)) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"method": m, "seed": s, "accuracy_curve": ramp(v, rng)}
            for s in seeds for m, v in speeds.items()]


def test_wordadd_rule_valid_run_refutes_a_null_arm_and_confirms_the_control() -> None:
    got = wordadd_decision(runs({"grpo": 1.0, "mmr": 1.0, "grpo-2xlr": 2.0}))
    assert got["valid"] is True and got["reason"] is None
    assert got["gates"]["control_speeds_up"]["verdict"] == "speeds up"
    assert got["control_interval"]["level"] == 0.95  # the control is its own family
    assert got["intervals"]["mmr"]["level"] == 0.95  # one non-control arm: k = 1
    assert got["verdict_per_arm"]["mmr"] in ("refuted", "inconclusive")
    assert got["verdict_per_arm"]["mmr"] == "refuted"  # 12 seeds of no effect, by construction
    assert got["intervals"]["mmr"]["excluded_from"] is not None
    assert got["intervals"]["mmr"]["excluded_from"] <= 1 / 0.52
    x = got["control_interval"]["excluded_from"]  # a 2x arm excludes no speed-up up to 2x
    assert x is None or x > 2.0


def test_wordadd_rule_gates_withhold_every_verdict() -> None:
    flat = wordadd_decision(runs({"grpo": 0.0, "mmr": 0.0, "grpo-2xlr": 0.0}))
    assert flat["valid"] is False and flat["verdict_per_arm"] == {"mmr": "no verdict"}
    assert flat["gates"]["grpo_gain"]["passed"] is False
    assert "grpo_gain" in flat["reason"] and "control_speeds_up" in flat["reason"]
    dud = wordadd_decision(runs({"grpo": 1.0, "mmr": 1.0, "grpo-2xlr": 1.0}))
    assert dud["gates"]["grpo_gain"]["passed"] is True
    assert dud["verdict_per_arm"] == {"mmr": "no verdict"}
    assert dud["reason"] == "validity gate failed: control_speeds_up"
    short = wordadd_decision(runs({"grpo": 1.0, "mmr": 1.0, "grpo-2xlr": 2.0}, range(7)))
    assert short["verdict_per_arm"] == {"mmr": "no verdict"} and "fewer than 8" in short["reason"]


def test_excluded_from_reads_the_speed_up_grid() -> None:
    curves = [ramp(1.0, np.random.default_rng(s)) for s in range(6)]
    d15 = delta_for_speedup(curves, 1 / 1.5)
    x = excluded_from(d15 - 1e-9, curves)
    assert x is not None and x <= 1.5
    assert delta_for_speedup(curves, 1 / x) > d15 - 1e-9
    assert excluded_from(10.0, curves) is None


def test_collect_only_writes_the_wordadd_decision(tmp_path) -> None:
    """Synthetic runs through the real collect path with --rule wordadd: the decision is the
    pre-registered one, its commit recorded, the control outside the arms' family."""
    import json

    from reweighter_research.experiment import main

    (tmp_path / "runs").mkdir()
    for r in runs({"grpo": 1.0, "mmr": 1.0, "grpo-2xlr": 2.0}):
        entry = {**r, "steps": 40, "reward_curve": r["accuracy_curve"], "accuracy": 0.5,
                 "pass_at_k": 0.8, "distinct_correct": 1.0, "mean_pairwise_similarity": 0.7,
                 "steps_to_target": None, "reweight_share": 0.01}
        (tmp_path / "runs" / f"{r['method']}-{r['seed']}.json").write_text(json.dumps(entry))
    argv = ["--config", CONFIG, "--out", str(tmp_path), "--methods", "grpo,mmr,grpo-2xlr",
            "--seeds", ",".join(map(str, range(40, 52))), "--collect-only", "--rule", "wordadd",
            "--preregistered", "abc123", "--no-dra-offline", "--eval-prompts", "2",
            "--samples", "8"]
    assert main(argv) == 0
    d = json.loads((tmp_path / "results.json").read_text())["decision"]
    assert d["preregistered_commit"] == "abc123" and d["arms"] == ["mmr"]
    assert d["control"] == "grpo-2xlr" and d["valid"] is True
    assert d["verdict_per_arm"] == {"mmr": "refuted"}


def test_the_committed_main_runs_recompute_no_verdict_and_came_after_the_rule() -> None:
    """experiments/wordadd-main: the device call stopped at its limit with every seed's GRPO run
    and nothing else; the pre-registered rule, recomputed from the file, gives no verdict (rule
    item 1); the rule's commit is strictly before the commit that added the data."""
    import json
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    results = json.loads((repo / "experiments/wordadd-main/results.json").read_text())
    runs = results["runs"]
    assert sorted((r["method"], r["seed"]) for r in runs) == [("grpo", s) for s in range(40, 52)]
    assert all(len(r["accuracy_curve"]) == 40 for r in runs)
    again = wordadd_decision(runs)
    d = results["decision"]
    assert again["verdict_per_arm"] == d["verdict_per_arm"] == {"mmr": "no verdict"}
    assert again["reason"] == d["reason"] == "0 seeds with every arm finished, fewer than 8"
    c = [r["accuracy_curve"] for r in runs]  # EXPERIMENTS.md's descriptive GRPO figures
    assert round(float(np.mean([np.mean(x[:5]) for x in c])), 3) == 0.128
    assert round(float(np.mean([np.mean(x[-10:]) for x in c])), 3) == 0.503
    assert round(delta_for_speedup(c), 3) == 0.077
    commit = d["preregistered_commit"]
    assert commit == (repo / "experiments/wordadd-gate/PREREGISTERED").read_text().strip()
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "experiments/wordadd-main/runs"],
        capture_output=True, text=True, cwd=repo, check=True).stdout.split()
    assert added, "the data are committed"
    anc = subprocess.run(["git", "merge-base", "--is-ancestor", commit, f"{added[-1]}~1"],
                         cwd=repo)
    assert anc.returncode == 0, f"{commit} is not strictly before {added[-1]}"


def test_the_embedder_recheck_recomputes_from_the_committed_groups() -> None:
    """experiments/wordadd-main/groups_gap.json: the embedder condition measured again, as
    pre-stated after the gate, on the 12 GRPO runs' logged groups (`gate --groups`). Its groups
    are exactly those logs' (sources, steps, which completions were correct); the mean cosine
    among correct completions and its interval recompute from the committed per-group cosines;
    and EXPERIMENTS states the pre-stated reading of its upper bound."""
    import json
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    main = repo / "experiments/wordadd-main"
    got = json.loads((main / "groups_gap.json").read_text())
    from reweighter_research.decision import read_groups

    logged = [  # the logs were gzipped after the re-check: a source is the name without .gz
        (p.name.removesuffix(".gz"), row["step"], [a is not None for a in row["answers"]])
        for p in sorted((main / "runs").glob("grpo-*.groups.jsonl*"))
        for row in read_groups(p)
    ]
    assert len(logged) == 12 * 80
    per_group = got["per_group"]
    assert sorted((g["source"], g["step"], g["correct"]) for g in per_group) == sorted(logged)
    assert all(len(g["cos_correct"]) == sum(g["correct"]) * (sum(g["correct"]) - 1) // 2
               for g in per_group)
    again = correct_similarity(per_group)
    for key in ("groups_with_two_correct", "correct_pairs", "mean_similarity_correct",
                "share_correct_pairs_same_path", "correct_paths_distinct"):
        assert again[key] == pytest.approx(got[key]), key
    assert again["mean_similarity_correct_ci95"] == pytest.approx(
        got["mean_similarity_correct_ci95"])
    high = got["mean_similarity_correct_ci95"][1]
    text = " ".join((repo / "EXPERIMENTS.md").read_text().split())  # line breaks as spaces
    assert f"{got['mean_similarity_correct']:.3f}" in text
    reading = "on a task where the embedder barely tells correct paths apart"
    assert (high >= SAME_PATH) == (f'verdict on wordadd is reported as "{reading}"' in text)
