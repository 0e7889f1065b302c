"""`reweighter reweight` (the offline CLI, in a fresh process) with the issue-30 methods: answers,
prompt keys and steps read from the JSONL, advantage_params from --pass-k, the new stats
written out. Groups carry embeddings, so no model is loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

E4 = [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


def run(tmp_path: Path, lines: list[dict], *flags: str) -> tuple[int, list[dict], str]:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    proc = subprocess.run(
        [sys.executable, "-m", "reweighter", "reweight", str(src), str(dst), *flags],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = [json.loads(x) for x in dst.read_text().splitlines()] if dst.exists() else []
    return proc.returncode, out, proc.stderr


@pytest.mark.process
def test_darling_and_pass_at_k_offline(tmp_path: Path) -> None:
    g = {"rewards": [1.0, 1.0, 0.5, 0.0], "embeddings": E4, "answers": ["4", "4", "5", None]}
    code, out, err = run(tmp_path, [g], "--method", "darling")
    assert code == 0, err
    assert out[0]["reweighted_rewards"] == pytest.approx([2 / 3, 2 / 3, 0.5, 0.0])
    assert out[0]["stats"]["classes"] == 3 and out[0]["stats"]["distinct_answers"] == 2
    g = {"rewards": [0.0, 1.0, 0.0, 0.0], "embeddings": E4}
    code, out, err = run(tmp_path, [g], "--method", "none", "--advantages", "pass_at_k",
                         "--pass-k", "2")  # fmt: skip
    assert code == 0, err
    assert out[0]["advantages"] == pytest.approx([-1 / 3, 1.0, -1 / 3, -1 / 3])
    code, _, err = run(tmp_path, [g], "--method", "none", "--advantages", "pass_at_k",
                       "--pass-k", "9")  # fmt: skip
    assert code == 2 and "advantage_params.k" in err


@pytest.mark.process
def test_outcome_ucb_offline_steps_in_order(tmp_path: Path) -> None:
    def line(step: int, answers: list[str]) -> dict:
        emb = [[1.0, float(i)] for i in range(len(answers))]
        return {"rewards": [0.0] * len(answers), "embeddings": emb, "answers": answers,
                "prompt_key": "p", "step": step}  # fmt: skip

    code, out, err = run(
        tmp_path, [line(1, ["a", "a"]), line(2, ["a", "b"])], "--method", "outcome_ucb",
        "--scale", "1.0", "--baseline", "none",
    )  # fmt: skip
    assert code == 0, err
    assert out[0]["reweighted_rewards"] == [1.0, 1.0]
    assert out[1]["reweighted_rewards"] == pytest.approx([1 / 2**0.5, 1.0])  # a twice before
    # The defaults (c = 0.2, b0 = 0.5) after GRPO: the paper's UCB-Con, rewards left as given.
    code, out, err = run(
        tmp_path, [line(1, ["a", "a"]), line(2, ["a", "b"])], "--method", "outcome_ucb",
        "--advantages", "grpo",
    )  # fmt: skip
    assert code == 0, err
    assert out[1]["reweighted_rewards"] == [0.0, 0.0]
    assert out[1]["advantages"] == pytest.approx([0.2 * (2**-0.5 - 0.5), 0.1])
