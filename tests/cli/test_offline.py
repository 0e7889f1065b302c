"""`reweighter reweight IN OUT`: results per line, and nothing written when a line is bad."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reweighter.cli import main


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_reweights_each_line_with_embeddings(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write(
        src,
        [
            {"id": "a", "rewards": [1, 1, 1], "embeddings": [[1, 0], [1, 0], [0, 1]], "x": 7},
            {"id": "b", "rewards": [2.0], "embeddings": [[3, 4]]},
        ]
        * 3,
    )
    rc = main(
        [
            "reweight",
            str(src),
            str(dst),
            "--method",
            "dra",
            "--advantages",
            "dr_grpo",
            "--batch-groups",
            "4",
        ]
    )
    assert rc == 0
    out = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r["id"] for r in out] == ["a", "b"] * 3  # order kept across batch boundaries
    a = out[0]
    assert a["x"] == 7 and a["rewards"] == [1, 1, 1]  # the input record is kept as it was
    assert a["reweighted_rewards"] == pytest.approx([0.5, 0.5, 1.0], abs=1e-5)
    # dr_grpo: r - mean, mean = 2/3
    assert a["advantages"] == pytest.approx([-1 / 6, -1 / 6, 1 / 3], abs=1e-5)
    assert a["stats"]["mean_similarity"] == pytest.approx(1 / 3, abs=1e-6)
    assert out[1]["reweighted_rewards"] == pytest.approx([2.0], abs=1e-5)


def test_mmr_flags(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write(src, [{"rewards": [1, 0, 1], "embeddings": [[1, 0], [1, 0], [0, 1]]}])
    assert main(["reweight", str(src), str(dst), "--method", "mmr", "--lambda", "0.5"]) == 0
    rec = json.loads(dst.read_text())
    # Items 0 and 2 tie at 1: item 2, the less like its group, goes first (test_engine's case).
    assert rec["reweighted_rewards"] == pytest.approx([0.5, -0.5, 1.0], abs=1e-6)
    assert rec["stats"]["lambda"] == pytest.approx(0.5)


def test_bad_line_writes_nothing_and_names_line_and_field(tmp_path: Path, capsys) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    good = {"rewards": [1.0], "embeddings": [[1.0]]}
    bad = {"rewards": [1.0, 2.0], "embeddings": [[1.0], [0.0]]}
    _write(src, [good, good, bad, good])
    rc = main(["reweight", str(src), str(dst), "--batch-groups", "2"])
    assert rc == 2
    assert not dst.exists()
    assert list(tmp_path.iterdir()) == [src]  # no temporary file left behind either
    err = capsys.readouterr().err
    assert "line 3" in err and "embeddings[1]" in err and "zero vector" in err


def test_invalid_json_line(tmp_path: Path, capsys) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"rewards": [1], "embeddings": [[1]]}\n{not json\n')
    assert main(["reweight", str(src), str(dst)]) == 2
    assert "line 2" in capsys.readouterr().err and not dst.exists()


@pytest.mark.process
def test_console_script_on_texts_with_the_real_model(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    texts = [
        "The answer is 4 because 2 + 2 = 4.",
        "The answer is 4 because 2 + 2 = 4.",
        "Counting on fingers: one, two, three, four. So 4.",
    ]
    _write(src, [{"completions": texts, "rewards": [1, 1, 1]}])
    proc = subprocess.run(
        [sys.executable, "-m", "reweighter", "reweight", str(src), str(dst), "--method", "dra"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(dst.read_text())
    r = rec["reweighted_rewards"]
    assert r[0] == pytest.approx(r[1], abs=1e-6)  # identical texts, identical credit
    assert r[2] > r[0]  # the distinct path keeps more
