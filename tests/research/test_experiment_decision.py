"""The pre-registered decision on synthetic logs; the pickone task and the papers' reward."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from reweighter.methods import advantages, dra
from reweighter_research.decision import decision, dra_offline
from reweighter_research.metrics import decide, first_step_reaching, paired, seed_ratio, trailing
from reweighter_trainer.config import load_raw, parse
from reweighter_trainer.data import PICK_CATEGORIES, PICK_SHOT, generate_pickone, load_dataset
from reweighter_trainer.rewards import (
    COSINE,
    PAPER_REWARD,
    answer_format_reward,
    correct_answer,
    correct_reward,
    cosine_scaled_correct_reward,
    extract_pick,
)

REPO = Path(__file__).resolve().parents[2]


# --- the primary metric ----------------------------------------------------------------------


def ramp(start: float, stop: float, steps: int, total: int = 40) -> list[float]:
    """Linear from `start` to `stop` over `steps` steps, then flat: a training-accuracy curve."""
    return [start + (stop - start) * min(t, steps) / steps for t in range(total)]


def test_trailing_means_and_first_step_by_hand() -> None:
    curve = [0.0] * 5 + [1.0] * 10
    t = trailing(curve, 10)
    # windows: steps 1-10 hold five 1s (0.5), 2-11 six (0.6), ..., 6-15 ten (1.0)
    assert t == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    assert first_step_reaching(curve, 0.75, 10) == 13  # window 4-13: eight 1s, 0.8
    assert first_step_reaching(curve, 1.01, 10) is None
    assert trailing([1.0] * 9, 10) == []  # no full window yet


def test_seed_ratio_by_hand() -> None:
    # GRPO: 0.2 at step 1, +0.01 a step for 30 steps, flat at 0.5 after: its trailing peak is
    # 0.5; the target is 0.5 - sqrt(0.25 / 80) = 0.44410 (one standard error below).
    # GRPO's window ending at step t <= 30 has mean 0.2 + 0.01 (t - 5.5): 0.435 at 29, 0.445 at
    # 30 -> S_grpo = 30.
    grpo = ramp(0.2, 0.5, 30)
    # MMR: the same climb in 15 steps. Window 9-18: 0.2 * 7 + 0.02 * (8 + ... + 14) + 3 * 0.5
    # = 4.44 -> 0.444 < 0.44410; window 10-19: 1.2 + 0.02 * 69 + 2.0 = 4.58 -> 0.458: step 19.
    mmr = ramp(0.2, 0.5, 15)
    r = seed_ratio(grpo, mmr)
    assert r["peak"] == pytest.approx(0.5)
    assert r["target"] == pytest.approx(0.5 - math.sqrt(0.25 / 80))
    assert (r["steps_grpo"], r["steps_mmr"]) == (30, 19)
    assert r["ratio"] == pytest.approx(19 / 30) and r["informative"]
    # first window (steps 1-10): 0.2 + 0.01 * mean(0..9) = 0.245; gain 0.255 >= 0.10
    assert r["grpo_gain"] == pytest.approx(0.255)
    literal = seed_ratio(grpo, mmr, target_se=0.0)  # the peak itself: steps 40 and 25
    assert (literal["steps_grpo"], literal["steps_mmr"]) == (40, 25)
    never = seed_ratio(grpo, [0.2] * 40)
    assert never["steps_mmr"] is None and never["ratio"] == math.inf
    flat = seed_ratio([0.3] * 40, mmr)  # GRPO never learned: this seed cannot inform
    # target 0.3 - sqrt(0.21 / 80) = 0.2488; MMR's window 1-10 is 0.2 + 0.02 * 4.5 = 0.29
    assert not flat["informative"] and flat["ratio"] == pytest.approx(10 / 10)
    assert seed_ratio(grpo[:5], mmr[:5])["informative"] is False  # fewer steps than a window


def _seeds(ratios: list[float], informative: bool = True) -> dict[int, dict]:
    return {i: {"ratio": r, "informative": informative} for i, r in enumerate(ratios)}


@pytest.mark.parametrize(
    ("ratios", "verdict"),
    [
        ([0.5, 0.6, 0.55, 0.7, 0.9, 0.4], "confirmed"),  # median 0.575, all < 1
        ([0.5, 0.6, 0.55, 0.7, 0.9], "confirmed"),  # five seeds suffice
        ([0.5, 0.6, 0.55, 0.7, 1.0, 0.4], "confirmed"),  # one seed not faster is allowed
        ([0.5, 0.6, 0.55, 1.2, 0.9, 0.4], "confirmed"),  # median 0.575, one slower
        ([0.5, 0.6, 0.55, 1.2, math.inf, 0.4], "inconclusive"),  # two not faster
        ([0.8, 0.9, 0.95, 0.85, 0.8, 0.78], "inconclusive"),  # median 0.825
        ([1.0, 1.2, math.inf, 0.7, 1.1, 0.9], "refuted"),  # median 1.05
        ([0.95, 0.97, 1.0, 0.6, 0.5, 1.3], "refuted"),  # median 0.96
        ([0.5, 0.5, 0.5, 0.5], "inconclusive"),  # four seeds: too few
    ],
)
def test_decide_applies_the_rule(ratios: list[float], verdict: str) -> None:
    assert decide(_seeds(ratios)) == verdict


def test_uninformative_seeds_do_not_vote() -> None:
    seeds = _seeds([0.5] * 5)
    seeds[0]["informative"] = False  # four informative left
    assert decide(seeds) == "inconclusive"
    seeds[9] = {"ratio": 0.5, "informative": True}
    assert decide(seeds) == "confirmed"


def test_paired_differences_and_sign_test_by_hand() -> None:
    got = paired([0.2, 0.3, 0.4, 0.5, 0.1, 0.3], [0.3, 0.4, 0.5, 0.6, 0.2, 0.3])
    assert got["diffs"] == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.1, 0.0])
    assert (got["wins"], got["losses"], got["ties"]) == (5, 0, 1)
    assert got["sign_test_p"] == pytest.approx(2 / 32)  # two-sided, n = 5 untied, k = 0
    assert paired([0.5], [0.5])["sign_test_p"] == 1.0


def _runs(grpo_steps: list[int], mmr_steps: list[int]) -> list[dict]:
    runs = []
    for seed, (g, m) in enumerate(zip(grpo_steps, mmr_steps, strict=True)):
        for method, steps, acc in (("grpo", g, 0.3), ("mmr", m, 0.35)):
            runs.append({
                "method": method, "seed": seed, "accuracy_curve": ramp(0.2, 0.5, steps),
                "sample_accuracy": acc + 0.01 * seed, "pass_at_k": 0.8, "distinct_correct": 1.5,
            })
    return runs


def test_decision_on_synthetic_logs() -> None:
    d = decision(_runs([30] * 6, [15, 12, 20, 10, 18, 14]))
    assert d["verdict"] == "confirmed" and d["informative_seeds"] == 6
    assert set(d) >= {"verdict", "rule", "per_seed", "secondary"}
    assert d["per_seed"]["0"]["steps_grpo"] == 30 and d["per_seed"]["0"]["steps_mmr"] == 19
    sec = d["secondary"]["sample_accuracy"]
    assert sec["wins"] == 6 and sec["mean"] == pytest.approx(0.05)
    assert d["secondary"]["pass_at_k"]["ties"] == 6
    slow = decision(_runs([20] * 6, [30, 30, 39, 25, 30, 30]))  # MMR slower everywhere
    assert slow["verdict"] == "refuted"
    never = decision(_runs([20] * 5, [20] * 4 + [400]))  # seed 4: MMR never reaches the peak
    assert never["per_seed"]["4"]["ratio"] is None and never["per_seed"]["4"]["mmr_never_reached"]
    json.dumps(never)  # results.json must hold it: no infinities


def test_dra_offline_on_logged_groups_with_the_real_kernels() -> None:
    """DRA against GRPO on two logged groups; embeddings per text stand in for the service's
    embedder, the arithmetic is the real kernels'."""
    vec = {"a": [1.0, 0.0], "a2": [0.99, 0.14], "b": [0.0, 1.0], "c": [0.6, 0.8]}
    groups = [
        {"completions": ["a", "a2", "b", "c"], "base_rewards": [3.0, 3.0, 0.0, 1.0]},
        {"completions": ["a", "b"], "base_rewards": [1.0, 1.0]},
    ]

    def reweight(method: str, gs: list[dict]) -> list[list[float]]:
        out = []
        for g in gs:
            r = torch.tensor(g["base_rewards"])
            if method == "dra":
                r = dra(r, torch.tensor([vec[t] for t in g["completions"]]))
            out.append(advantages(r, "grpo").tolist())
        return out

    got = dra_offline(groups, reweight)
    assert got["groups"] == 2
    # Group 2: equal rewards, orthogonal texts: DRA leaves both at 1 / (1 + eps): no change.
    # Group 1: the near-copies a, a2 share their reward; the change is well above 0.05.
    g1 = reweight("dra", groups[:1])[0]
    g0 = reweight("none", groups[:1])[0]
    mean1 = sum(abs(x - y) for x, y in zip(g1, g0, strict=True)) / 4
    assert mean1 > 0.05
    assert got["median_abs_change"] == pytest.approx(mean1 / 2, abs=1e-6)  # median of 2 values
    assert got["dra_is_grpo"] == (mean1 / 2 < 0.05)


# --- the pickone task and the papers' reward ----------------------------------------------------


def test_pickone_rows_are_deterministic_and_held_out_wordings_unseen() -> None:
    train, test = generate_pickone(300, "train"), generate_pickone(60, "test")
    assert train == generate_pickone(300, "train")
    text = lambda rows: {r["prompt"][-1]["content"] for r in rows}  # noqa: E731
    assert len(text(train)) == 6 * 2 * 9 and len(text(test)) == 6 * 9
    assert not text(train) & text(test)
    for r in train + test:
        assert r["prompt"][:2] == PICK_SHOT and r["check"] == "pick_one"
        assert r["answer"] in PICK_CATEGORIES
    assert all(3 <= len(good) <= 4 for _, good, _, _ in PICK_CATEGORIES.values())
    assert len(load_dataset("pickone", "test", 54)) == 54
    with pytest.raises(ValueError, match="dataset.split"):
        generate_pickone(3, "dev")


@pytest.mark.parametrize(
    ("text", "category", "want"),
    [
        ("Answer: June", "month_30_days", "june"),
        ("It is June.\nAnswer: **April**", "month_30_days", "april"),
        ("Answer: June and April", "month_30_days", None),  # two named: not one answer
        ("Answer: May", "month_30_days", None),  # a month, a wrong one
        ("June has 30 days.", "month_30_days", None),  # no "Answer:" line
        ("Answer: five", "prime_below_10", "5"),  # number words count as their digit
        ("Answer: 15", "prime_below_10", None),  # 15, not 1 or 5
        ("Answer: 7\nAnswer: 9", "prime_below_10", None),  # the last answer counts
        ("Answer: Junebug", "month_j", None),  # whole words only
    ],
)
def test_pickone_checker(text: str, category: str, want: str | None) -> None:
    assert correct_answer(text, category, "pick_one") == want


def test_extract_pick_names_one_item_of_a_domain() -> None:
    assert extract_pick("answer: Tuesday!", "day") == "tuesday"
    assert extract_pick("Answer: 2 or 4", "number") is None
    assert correct_answer("Answer: 12", "12") == "12"  # other tasks: the number after Answer


def test_cosine_scaled_reward_by_hand() -> None:
    assert COSINE == {"min_value_wrong": 0.0, "max_value_wrong": -0.5,
                      "min_value_correct": 0.5, "max_value_correct": 1.0, "max_len": 1000}
    assert PAPER_REWARD == {"answer_format": 1.0, "cosine": 2.0}
    right = "Answer: June"  # 12 characters: cos(pi * 12 / 1000) = 0.999289
    half = "x" * 487 + "\nAnswer: June"  # 500 characters: cos(pi / 2) = 0
    wrong_half = "y" * 486 + "\nAnswer: March"  # 500 characters, wrong
    full_wrong = "z" * 1000
    texts = [right, half, wrong_half, full_wrong, ""]
    assert [len(t) for t in texts] == [12, 500, 500, 1000, 0]
    got = cosine_scaled_correct_reward(None, texts, answer=["month_j"] * 5,
                                       check=["pick_one"] * 5)
    # correct: 0.5 + 0.25 * (1 + cos); wrong: -0.5 + 0.25 * (1 + cos)
    want = [0.5 + 0.25 * (1 + math.cos(math.pi * 0.012)), 0.75, -0.25, -0.5, 0.0]
    assert got == pytest.approx(want, abs=1e-12)
    assert correct_reward(None, texts, answer=["month_j"] * 5, check=["pick_one"] * 5) == [
        1.0, 1.0, 0.0, 0.0, 0.0]


def test_answer_format_reward() -> None:
    texts = ["Answer: June", "Let me think.\nAnswer: 5\n", "Answer:", "June", "Answer: x\nmore"]
    assert answer_format_reward(None, texts) == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_the_pickone_config_parses_with_the_papers_reward() -> None:
    cfg = parse(load_raw(REPO / "research" / "configs" / "smollm2-pickone.yaml"))
    assert cfg.dataset.name == "pickone" and cfg.rewards == PAPER_REWARD
    assert cfg.grpo["num_generations"] == 8 and cfg.grpo["max_completion_length"] == 48
    assert cfg.reweighter.method == "mmr" and cfg.reweighter.params == {}


@pytest.mark.process
def test_collect_only_writes_the_decision_and_its_plots(tmp_path: Path) -> None:
    """results.json carries "decision" (verdict, rule, per_seed) from finished GRPO and MMR runs,
    and the plots draw the paired curves and the per-seed ratios from it."""
    from reweighter_research.experiment import main
    from reweighter_research.plots import plot

    (tmp_path / "runs").mkdir()
    for run in _runs([30] * 6, [15, 12, 20, 10, 18, 45]):  # seed 5: MMR never gets there
        entry = {**run, "steps": 40, "reward_curve": run["accuracy_curve"],
                 "steps_to_target": None, "accuracy": 0.5, "mean_pairwise_similarity": 0.7,
                 "reweight_share": 0.01, "similarity_curve": [0.8] * 40}
        (tmp_path / "runs" / f"{run['method']}-{run['seed']}.json").write_text(json.dumps(entry))
    config = REPO / "trainer" / "configs" / "smoke-cpu.yaml"
    argv = ["--config", str(config), "--out", str(tmp_path), "--methods", "grpo,mmr",
            "--seeds", "0,1,2,3,4,5", "--collect-only"]
    assert main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    d = results["decision"]
    # Five seeds well under 1, one never (the one seed allowed not to be faster): confirmed.
    assert d["verdict"] == "confirmed" and d["rule"].startswith("Per seed s")
    assert d["per_seed"]["5"]["mmr_never_reached"] and d["informative_seeds"] == 6
    assert "dra_offline" not in results  # no GRPO group logs to check DRA on
    names = {p.name for p in plot(tmp_path)}
    assert {"paired.png", "ratios.png", "reward.png"} <= names
    assert (tmp_path / "paired.png").stat().st_size > 5000


def test_step_recorder_scores_training_groups_with_the_checker(tmp_path: Path) -> None:
    """The training accuracy the rule uses is the checker's, not the reward; every group lands
    in the JSONL log the offline DRA check reads."""
    from reweighter_research.decision import read_groups
    from reweighter_research.experiment import StepRecorder

    rows = generate_pickone(4, "train")
    rec = StepRecorder(rows, 2, tmp_path / "g.jsonl")
    gold = rows[0]["answer"]
    good = sorted(PICK_CATEGORIES[gold][1])
    batch = {
        "prompts": [rows[0]["prompt"]] * 2 + [rows[1]["prompt"]] * 2,
        "completions": [f"Answer: {good[0]}", f"Answer: {good[1]}", "no idea", "Answer: ?"],
        "base_rewards": [2.9, 2.9, 0.0, 1.0], "rewards": [1.0, 1.0, 0.0, 0.5],
    }
    rec(batch)
    assert rec.accuracy == [0.5] and rec.distinct == [1.0]  # groups: 2 distinct, 0 distinct
    logged = read_groups(tmp_path / "g.jsonl")
    assert [g["answers"] for g in logged] == [good[:2], [None, None]]
    assert logged[0]["base_rewards"] == [2.9, 2.9] and logged[1]["gold"] == rows[1]["answer"]
    with pytest.raises(RuntimeError, match="unknown prompt"):
        rec({**batch, "prompts": [[{"role": "user", "content": "elsewhere"}]] * 4})


def test_gate_numbers_by_hand() -> None:
    from reweighter_research.gate import similarity_pairs, summarise

    # Three correct answers (june, june, july) and a wrong one; unit vectors at 0, 0 and 90
    # degrees: the same-answer pair has cosine 1, the two different-answer pairs 0.
    emb = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    same, diff = similarity_pairs(emb, ["june", "june", "july", None])
    assert same == pytest.approx([1.0]) and diff == pytest.approx([0.0, 0.0])
    prompts = [
        {"correct": [True, True, True, False], "distinct": 2, "same": same, "diff": diff},
        {"correct": [True, False, False, False], "distinct": 1, "same": [], "diff": []},
        {"correct": [False] * 4, "distinct": 0, "same": [], "diff": []},
    ]
    got = summarise(prompts * 2)  # six prompts, two of them with both kinds of pairs
    assert got["accuracy"] == pytest.approx(8 / 24) and got["accuracy_in_band"]
    assert got["similarity_gap"] == pytest.approx(1.0)
    assert got["similarity_gap_ci95"] is None  # fewer than 3 prompts with both: no interval
    assert not got["passed"] and got["distinct_correct_per_prompt"] == pytest.approx(1.0)
    many = summarise(prompts * 4)
    assert many["similarity_gap_ci95"] == pytest.approx((1.0, 1.0)) and many["passed"]


@pytest.mark.parametrize("module", ["reweighter_research.gate", "reweighter_research.experiment"])
def test_documented_entry_points_start_in_a_fresh_process(module: str) -> None:
    """The commands EXPERIMENTS.md gives (`python -m ... --help`; the runs themselves are hours of
    CPU and are not part of the suite)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "--out" in proc.stdout


def test_the_rules_operating_characteristics() -> None:
    """What EXPERIMENTS.md quotes: with no effect the rule almost never confirms; with the
    paper's 2x speed-up and a GRPO still climbing at step 40 it almost always does."""
    from reweighter_research.decision import main, operating_characteristics

    rows = {(r["top"], r["ramp"], r["speed"]): r for r in operating_characteristics(60)}
    assert rows == {(r["top"], r["ramp"], r["speed"]): r for r in operating_characteristics(60)}
    assert all(r["confirmed"] <= 0.05 for k, r in rows.items() if k[2] == 1.0)
    assert all(r["refuted"] >= 0.5 for k, r in rows.items() if k[2] == 1.0)
    assert rows[(0.7, 40, 0.52)]["confirmed"] >= 0.85
    assert all(abs(sum(r[v] for v in ("confirmed", "refuted", "inconclusive")) - 1) < 1e-9
               for r in rows.values())
    assert main(["--simulate", "5"]) == 0 and main([]) == 2
