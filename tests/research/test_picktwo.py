"""The picktwo task, its checker and scaled reward, the answers it exposes, and the area rule
(issue 31) checked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from reweighter_research.decision import (
    area_decision,
    area_verdict,
    compressed,
    delta_for_speedup,
    simulate_power,
)
from reweighter_trainer.config import load_raw, parse
from reweighter_trainer.data import PICK_TWO_CATEGORIES, PICK_TWO_DROPPED, generate_picktwo
from reweighter_trainer.rewards import (
    TASK_MAX_LEN,
    correct_answer,
    cosine_scaled_correct_reward,
    extract_answers,
    given_answer,
)

REPO = Path(__file__).resolve().parents[2]


def test_picktwo_rows_are_deterministic_and_held_out_wordings_unseen() -> None:
    train, test = generate_picktwo(200, "train"), generate_picktwo(72, "test")
    assert train == generate_picktwo(200, "train")
    assert {r["check"] for r in train + test} == {"pick_two"}
    seen = {r["prompt"][-1]["content"] for r in train}
    assert not seen & {r["prompt"][-1]["content"] for r in test}
    assert {r["answer"] for r in test} == set(PICK_TWO_CATEGORIES)
    assert train[0]["prompt"][1]["content"] == "Answer: blue and white"
    assert len({r["prompt"][-1]["content"] for r in train}) == 144  # 8 categories x 2 x 9
    assert len({r["prompt"][-1]["content"] for r in test}) == 72
    assert not set(PICK_TWO_DROPPED) & set(PICK_TWO_CATEGORIES)


@pytest.mark.parametrize(("text", "category", "want"), [
    ("Answer: July and March", "month_31_days", "july+march"),
    ("Answer: March, July", "month_31_days", "july+march"),  # order does not make an answer
    ("I think...\nAnswer: may and october.", "month_31_days", "may+october"),
    ("Answer: July and July", "month_31_days", None),       # the same month twice
    ("Answer: July", "month_31_days", None),                 # one is not two
    ("Answer: July, May and March", "month_31_days", None),  # three is not two
    ("Answer: July and June", "month_31_days", None),        # June has 30
    ("Answer: two and 4", "number_below_10", "2+4"),
    ("Answer: 2 and 4 are numbers below 10", "number_below_10", None),  # names 10 too
    ("Answer: 0 and nine", "number_below_10", "0+9"),
    ("The answer is 3 and 5", "prime_below_10", None),       # no "Answer:" line
    ("Answer: Monday and Friday", "weekday", "friday+monday"),
    ("Answer: Monday and Sunday", "weekday", None),           # Sunday is not a working day
    ("Answer: Monday and Sunday", "day_any", "monday+sunday"),
    ("Answer: April and December", "month_any", "april+december"),
    ("Answer: summer and fall", "month_any", None),           # no month named
])
def test_picktwo_checker(text: str, category: str, want: str | None) -> None:
    assert correct_answer(text, category, "pick_two") == want


def test_given_answer_is_the_answer_right_or_wrong() -> None:
    """What the service's `answers` field receives: equal strings = the same answer."""
    assert given_answer("Answer: May and April", "month_summer", "pick_two") == "april+may"
    assert given_answer("no answer line", "month_summer", "pick_two") is None
    assert given_answer("Answer: nothing here", "month_summer", "pick_two") is None
    assert given_answer("Answer: 7", "prime_below_10", "pick_one") == "7"
    assert given_answer("so Answer: 12", "12") == "12"
    got = extract_answers(
        [[{"role": "assistant", "content": "Answer: June and April"}], "Answer: April, June"],
        ["month_any"] * 2, ["pick_two"] * 2,
    )
    assert got == ["april+june", "april+june"]


def test_cosine_reward_scaled_to_the_task_by_hand() -> None:
    """picktwo's max_len is TASK_MAX_LEN (200 characters): a correct 100-character answer sits
    half-way, 0.75; a wrong one at 200 characters pays the full -0.5."""
    assert TASK_MAX_LEN["pick_two"] == 200
    right = "x" * (100 - len("Answer: March and July")) + "Answer: March and July"
    wrong = "y" * 200
    got = cosine_scaled_correct_reward(None, [right, wrong, ""], ["month_31_days"] * 3,
                                       ["pick_two"] * 3)
    assert got == pytest.approx([0.75, -0.5, 0.0])
    # pickone keeps the papers' 1000: 100 characters correct -> 0.5 + 0.25 (1 + cos(0.1 pi))
    one = cosine_scaled_correct_reward(None, ["z" * 91 + "Answer: 2"], ["prime_below_10"],
                                       ["pick_one"])
    assert one == pytest.approx([0.5 + 0.25 * (1 + math.cos(0.1 * math.pi))])


def test_compressed_curve_and_delta_by_hand() -> None:
    # 10 steps rising 0.0 .. 0.9; at speed 0.5 step t takes the curve at 2t: steps 1-5 read
    # steps 2, 4, 6, 8, 10 (0.1, 0.3, 0.5, 0.7, 0.9); steps 6-10 the last-10 mean 0.45
    c = [i / 10 for i in range(10)]
    assert compressed(c, 0.5) == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9] + [0.45] * 5)
    assert delta_for_speedup([c], 0.5) == pytest.approx((2.5 + 2.25) / 10 - 0.45)
    assert delta_for_speedup([[0.3] * 20], 0.52) == pytest.approx(0.0)


def test_area_rule_by_hand() -> None:
    # d = 0.1, 0.2, 0.3: mean 0.2, se 0.1/sqrt(3); one arm: t(0.975, 2) = 4.3027
    v = area_verdict([0.1, 0.2, 0.3], delta_2x=0.05, arms=1)
    half = 4.302652729911275 * 0.1 / math.sqrt(3)
    assert v["interval"] == pytest.approx([0.2 - half, 0.2 + half])
    assert v["verdict"] == "inconclusive"  # lower bound -0.048 < 0
    assert area_verdict([0.1, 0.11, 0.12], 0.05, 1)["verdict"] == "speeds up"
    assert area_verdict([-0.01, 0.0, 0.01], 0.03, 1)["verdict"] == "refuted"  # upper 0.0248
    # Bonferroni: two arms widen each interval to 97.5 %: t(0.9875, 2) = 6.2053, upper 0.0358
    two = area_verdict([-0.01, 0.0, 0.01], 0.03, 2)
    assert two["level"] == pytest.approx(0.975)
    assert two["interval"][1] == pytest.approx(6.205339 * 0.01 / math.sqrt(3), rel=1e-5)
    assert two["verdict"] == "inconclusive"
    runs = [{"method": m, "seed": s, "accuracy_curve": [base + (0.1 if m == "mmr" else 0.0)
                                                        + 0.01 * s] * 4}
            for s, base in enumerate([0.2, 0.3, 0.25]) for m in ("grpo", "mmr", "dra")]
    dec = area_decision(runs, delta_2x=0.08, arms=["mmr", "dra"])
    assert dec["verdict_per_arm"] == {"mmr": "speeds up", "dra": "refuted"}
    assert dec["intervals"]["mmr"]["seeds"] == [0, 1, 2]


def test_power_simulation_separates_no_effect_from_2x() -> None:
    ramp = [0.2 + 0.5 * min(t / 40, 1) for t in range(60)]
    delta = delta_for_speedup([ramp])
    p = simulate_power(ramp, phi=2.0, tau=0.1, seeds=8, arms=1, delta_2x=delta, group=8,
                       n=200)
    assert p["no_effect:speeds up"] <= 0.06 and p["2x:speeds up"] >= 0.5
    assert p["2x:refuted"] <= 0.05
    assert all(abs(sum(p[f"{k}:{v}"] for v in ("speeds up", "refuted", "inconclusive")) - 1)
               < 1e-9 for k in ("no_effect", "2x"))


def test_the_picktwo_config_parses() -> None:
    cfg = parse(load_raw(REPO / "research/configs/smollm2-picktwo.yaml"))
    assert cfg.dataset.name == "picktwo" and dict(cfg.rewards) == {"answer_format": 1.0,
                                                                   "cosine": 2.0}
    assert np.isfinite(cfg.grpo["learning_rate"])


def test_every_arm_is_a_config_the_trainer_accepts() -> None:
    """The arms' methods, params and extra config pass the trainer's own check (a bad one would
    fail only after the policy loaded, an hour into a CPU run); MMR is the paper's (diversify);
    grpo-passk asks for pass@k advantages with TRL's scaling off."""
    import json

    from reweighter_research.experiment import ARM_CONFIG, ARMS

    assert {"grpo", "mmr", "dra", "darling", "grpo-passk"} <= set(ARMS)
    for arm, (method, params) in ARMS.items():
        raw = load_raw(REPO / "research/configs/smollm2-picktwo.yaml")
        raw["reweighter"].update(method=method, params=dict(params))
        for key, value in json.loads(json.dumps(ARM_CONFIG.get(arm, {}))).items():
            raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
        cfg = parse(raw)
        assert cfg.reweighter.params == params
    assert ARMS["mmr"][1]["equal_rewards"] == "diversify"
    from reweighter_research.experiment import arm_raw

    cfg = parse(arm_raw(load_raw(REPO / "research/configs/smollm2-picktwo.yaml"), "grpo-passk",
                        "http://127.0.0.1:1"))
    assert cfg.reweighter.advantages == "pass_at_k" and cfg.grpo["scale_rewards"] == "none"
    assert cfg.reweighter.advantage_params == {"k": 4, "success_threshold": 1.0}


def test_pass_at_k_threshold_separates_right_from_wrong_under_the_papers_reward() -> None:
    """success_threshold 1.0 splits the papers' reward (format x 1 + cosine x 2) exactly on
    picktwo: correct >= 1.0 at every length, wrong < 1.0 at every length a completion has."""
    from reweighter_trainer.rewards import answer_format_reward

    def total(texts: list[str]) -> list[float]:
        fmt = answer_format_reward(None, texts)
        cos = cosine_scaled_correct_reward(None, texts, ["month_summer"] * len(texts),
                                           ["pick_two"] * len(texts))
        return [f + 2 * c for f, c in zip(fmt, cos, strict=True)]

    right = ["Answer: July and August"] + [
        "x" * n + "\nAnswer: June and July" + tail
        for n in (0, 80, 177, 260) for tail in ("", "\nok")]
    wrong = ["Answer: July", "Answer: May and June"] + [
        "y" * n + "\nAnswer: June" + tail
        for n in (0, 80, 187, 260) for tail in ("", "\nno")]
    assert all(correct_answer(t, "month_summer", "pick_two") for t in right)
    assert not any(correct_answer(t, "month_summer", "pick_two") for t in wrong)
    assert min(total(right)) >= 1.0 > max(total(wrong))


def test_embedder_gap_from_logged_groups_by_hand() -> None:
    """gate.from_groups: the within-prompt gap (mean cosine of same-answer correct pairs less
    different-answer ones) over logged groups, wrong completions ignored. Unit vectors by hand:
    a.b = 1 (same answer), a.c = 0.6 (different): gap 0.4 in each of three groups."""
    from reweighter_research.gate import from_groups

    vec = {"A1": [1.0, 0.0], "A2": [1.0, 0.0], "B": [0.6, 0.8], "W": [0.0, 1.0]}
    groups = [{"completions": ["A1", "A2", "B", "W"],
               "answers": ["july+june", "july+june", "august+july", None]}] * 3
    got = from_groups(groups, lambda texts: np.array([vec[t] for t in texts]))
    assert got["prompts_with_same_and_different_pairs"] == 3
    assert got["mean_similarity_same_answer"] == pytest.approx(1.0)
    assert got["mean_similarity_different_answer"] == pytest.approx(0.6)
    assert got["similarity_gap"] == pytest.approx(0.4)
    assert got["similarity_gap_ci95"] == pytest.approx([0.4, 0.4])
    assert got["accuracy"] == pytest.approx(0.75) and got["embedder_sees_diversity"]


def test_jobs_split_the_seeds_and_keep_every_other_option() -> None:
    """--jobs N: process j trains seeds[j::N] with the same options and overrides, one job."""
    from reweighter_research.experiment import child_argv

    argv = ["--config", "c.yaml", "--out", "o", "--seeds", "0,1,2,3", "--jobs", "2",
            "--methods", "grpo,mmr", "learning_rate=5e-6"]
    assert child_argv(argv, [0, 2]) == ["--config", "c.yaml", "--out", "o", "--methods",
                                        "grpo,mmr", "learning_rate=5e-6", "--seeds", "0,2",
                                        "--jobs", "1"]
    assert child_argv(["--seeds=5", "--jobs=3", "--steps", "3"], [5]) == [
        "--steps", "3", "--seeds", "5", "--jobs", "1"]


def test_a_pilot_too_short_is_refused_with_a_reason(tmp_path) -> None:
    """`decision --pilot DIR` on GRPO curves shorter than 10 steps (a --quick run's) says why and
    exits 2, instead of numpy's error from a NaN overdispersion deep in the simulation."""
    import json
    import subprocess
    import sys

    runs = [{"method": "grpo", "seed": s, "steps": 3, "accuracy_curve": [0.0, 0.25, 0.5]}
            for s in (0, 1)]
    (tmp_path / "results.json").write_text(json.dumps({"task": {}, "runs": runs}))
    proc = subprocess.run([sys.executable, "-m", "reweighter_research.decision", "--pilot",
                           str(tmp_path), "10"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "the GRPO curves have 3 steps; a pilot needs at least 10" in proc.stderr
    assert not (tmp_path / "pilot.json").exists()
