"""`reweighter reweight`'s method flags come from the catalogue: one per parameter, parsed as
the values they spell, and a flag of another method than the chosen one is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from reweighter.cli import build_parser, main, method_params
from reweighter.methods.catalog import CATALOG


def _params(*argv: str) -> dict:
    return method_params(build_parser().parse_args(["reweight", "in", "out", *argv]))


def test_one_flag_per_parameter_of_every_method(capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit):
        main(["reweight", "--help"])
    usage = capsys.readouterr().out
    for spec in CATALOG.values():
        for name, f in spec.params_model.model_fields.items():
            assert f"--{(f.alias or name).replace('_', '-')} VALUE" in usage, name
    assert f"--method {{{','.join(str(m) for m in CATALOG)}}}" in usage
    assert "--advantages {grpo,dr_grpo,pass_at_k,none}" in usage and "--pass-k K" in usage


def test_flag_values_are_what_they_spell() -> None:
    assert _params("--method", "dra", "--similarity-floor", "none") == {"similarity_floor": None}
    assert _params("--method", "dra", "--eps", "1e-3") == {"eps": 1e-3}
    assert _params("--method", "mmr", "--lambda", "adaptive") == {"lambda": "adaptive"}
    assert _params("--method", "mmr", "--lambda", "0.25") == {"lambda": 0.25}
    assert _params("--method", "mmr") == {}  # absent: the model's default applies
    assert _params("--method", "outcome_ucb", "--baseline", "mean") == {"baseline": "mean"}
    assert _params("--method", "outcome_ucb", "--baseline", "none") == {"baseline": None}
    assert _params("--method", "outcome_ucb", "--baseline", "1") == {"baseline": 1}
    assert _params("--method", "outcome_ucb", "--target", "reward") == {"target": "reward"}


def test_a_flag_of_another_method_is_an_error(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match="--lambda is a parameter of mmr, not dra"):
        _params("--method", "dra", "--lambda", "0.5")
    src = tmp_path / "in.jsonl"
    src.write_text('{"rewards": [1.0], "embeddings": [[1.0]]}\n')
    rc = main(["reweight", str(src), str(tmp_path / "out.jsonl"), "--similarity-floor", "0.1",
               "--method", "none"])  # fmt: skip
    assert rc == 2
    assert "--similarity-floor is a parameter of dra, not none" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()
