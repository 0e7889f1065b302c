"""Held-out metrics, the wordmath task and its reward: hand-computed cases."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from reweighter_research.metrics import (
    distinct_correct,
    mean_pairwise_similarity,
    pass_at_k,
    steps_to_target,
)
from reweighter_trainer.data import generate_wordadd, generate_wordmath, load_dataset
from reweighter_trainer.rewards import extract_final_number, final_answer_reward

MODEL_CONFIG = "trainer/configs/smoke-cpu.yaml"  # its model is built in setup (tests/conftest.py)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (8, 0, 8, 0.0),  # nothing correct
        (8, 1, 8, 1.0),  # k = n: any correct sample is in the only subset
        (4, 1, 1, 0.25),  # pass@1 = c / n
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (16, 2, 8, 1 - 3003 / 12870),  # 1 - C(14,8)/C(16,8)
        (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4)
        (10, 7, 4, 1.0),  # fewer than k wrong ones: every 4-subset holds a correct one
    ],
)
def test_pass_at_k_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(8, 9, 8), (8, -1, 8), (8, 2, 9), (8, 2, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def _at(deg: float) -> list[float]:
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


def test_distinct_correct_clusters_only_correct_completions():
    # 0 and 5 degrees: cosine 0.996 (one solution); 90 degrees: another; 2 degrees but wrong.
    emb = [_at(0), _at(5), _at(90), _at(2)]
    assert distinct_correct(emb, [True, True, True, False]) == 2
    assert distinct_correct(emb, [True, False, False, True]) == 1  # 0 and 2 degrees: one
    assert distinct_correct(emb, [False] * 4) == 0
    assert distinct_correct(emb, [True] * 4, threshold=0.9999) == 4  # stricter: all differ
    # 30 degrees apart: cosine 0.866 < 0.9, so a chain 0, 30, 60 is three solutions.
    assert distinct_correct([_at(0), _at(30), _at(60)], [True] * 3) == 3
    # Scale does not matter (cosine), only direction.
    assert distinct_correct([[2.0, 0.0], [0.5, 0.0]], [True, True]) == 1


def test_distinct_correct_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 embeddings but 3"):
        distinct_correct([[1, 0], [0, 1]], [True, True, False])


def test_mean_pairwise_similarity_by_hand():
    # pairs: (x, y) 0, (x, x+y) 1/sqrt2, (y, x+y) 1/sqrt2
    got = mean_pairwise_similarity([[1, 0], [0, 1], [1, 1]])
    assert got == pytest.approx(2 / math.sqrt(2) / 3)
    assert mean_pairwise_similarity([[3, 4]]) == 1.0
    assert mean_pairwise_similarity([[1, 0], [-1, 0]]) == pytest.approx(-1.0)


def test_steps_to_target_uses_a_trailing_mean():
    curve = [0.0, 0.2, 0.6, 0.7, 0.9]
    # trailing-3 means: -, -, 0.267, 0.5, 0.733
    assert steps_to_target(curve, 0.5) == 4
    assert steps_to_target(curve, 0.8) is None
    assert steps_to_target(curve, 0.6, window=1) == 3
    assert steps_to_target([1.0], 0.5) == 1  # shorter than the window: its own mean


def test_wordmath_answers_follow_the_story():
    rows = generate_wordmath(200, seed=3)
    assert rows == generate_wordmath(200, seed=3)  # deterministic
    for row in rows:
        text = row["prompt"][0]["content"]
        nums = [int(x) for x in re.findall(r"\d+", text)]
        a, x, y = nums[:3]
        expected = a + x - y if "buys" in text else a - x + y
        assert row["answer"] == str(expected) and expected >= 0
        assert row["prompt"][0]["role"] == "user" and "Answer: <number>" in text


def test_wordmath_train_and_test_do_not_share_prompts():
    train = {r["prompt"][0]["content"] for r in load_dataset("wordmath", "train", 256)}
    test = {r["prompt"][0]["content"] for r in load_dataset("wordmath", "test", 64)}
    assert len(test) > 30 and len(test & train) < len(test) // 2
    with pytest.raises(ValueError, match="dataset.split"):
        load_dataset("wordmath", "validation", 4)


def test_wordadd_answers_are_the_sum_and_held_out_prompts_are_unseen():
    rows = generate_wordadd(300, seed=3)
    assert rows == generate_wordadd(300, seed=3)  # deterministic
    for row in rows:
        text = row["prompt"][0]["content"]
        a, b = (int(x) for x in re.findall(r"\d+", text)[:2])
        assert 2 <= a <= 9 and 2 <= b <= 9 and row["answer"] == str(a + b)
        assert "Answer: <number>" in text
    assert len({r["prompt"][0]["content"] for r in rows}) == 300  # no repeats within a split
    # The train split is a prefix whatever its limit, and no held-out prompt is a train prompt,
    # even one from train rows a run did not use.
    train = [r["prompt"][0]["content"] for r in load_dataset("wordadd", "train", 512)]
    assert [r["prompt"][0]["content"] for r in load_dataset("wordadd", "train", 40)] == train[:40]
    test = [r["prompt"][0]["content"] for r in load_dataset("wordadd", "test", 64)]
    assert len(set(test)) == 64 and not set(test) & set(train)
    with pytest.raises(ValueError, match="dataset.split"):
        load_dataset("wordadd", "validation", 4)


def test_final_answer_reward_reads_the_last_answer():
    completions = [
        "9 + 4 = 13, 13 - 2 = 11. Answer: 11",
        "The answer is 11.",
        "**Answer:** 11 apples",
        "11",  # no "answer": intermediate numbers never count
        "Answer: 12 ... wait. Answer: 11",
        "Answer: 1,1",  # "1,1" is read as 11 (thousands separator removed)
        "Answer: -11",
        [{"role": "assistant", "content": "Answer: 11"}],
    ]
    got = final_answer_reward(None, completions, answer=["11"] * len(completions))
    assert got == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert extract_final_number("answer: 3.50") == "3.50"


def test_collect_only_writes_results_with_the_untrained_reference_and_plots(tmp_path):
    """`--collect-only` assembles results.json from finished runs (what a resumed or interrupted
    experiment does); the untrained policy's metrics ride along without its example texts, and
    the plots draw from that file."""
    import json

    from reweighter_research.experiment import main
    from reweighter_research.plots import plot

    runs = tmp_path / "runs"
    runs.mkdir()
    for method, acc in (("grpo", 0.25), ("dra", 0.5)):
        entry = {
            "method": method, "seed": 0, "steps": 2, "reward_curve": [0.0, acc],
            "steps_to_target": None, "pass_at_k": acc, "accuracy": acc,
            "distinct_correct": 2 * acc, "mean_pairwise_similarity": 0.7,
            "reweight_share": 0.01, "similarity_curve": [0.8, 0.75],
        }  # fmt: skip
        (runs / f"{method}-0.json").write_text(json.dumps(entry))
    base = {"accuracy": 0.125, "pass_at_k": 0.5, "distinct_correct": 0.5,
            "mean_pairwise_similarity": 0.8, "examples": [{"prompt": "p"}]}  # fmt: skip
    (tmp_path / "base.json").write_text(json.dumps(base))
    config = Path(__file__).resolve().parents[2] / "trainer/configs/smoke-cpu.yaml"
    argv = ["--config", str(config), "--out", str(tmp_path),
            "--methods", "grpo,dra,mmr", "--collect-only"]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert [r["method"] for r in results["runs"]] == ["grpo", "dra"]  # mmr never ran: left out
    assert results["untrained"] == {k: v for k, v in base.items() if k != "examples"}
    assert results["task"]["name"] == "arith" and results["task"]["k"] == 8
    written = plot(tmp_path)
    assert {p.name for p in written} == {"reward.png", "similarity.png", "heldout.png"}
    assert all(p.stat().st_size > 1000 for p in written)
