"""The advantage estimators' catalogue (methods/estimators.py) and its recipe (docs/methods.md,
"Adding an advantage estimator"): an estimator added as the recipe says (a kernel, a parameter
model, one entry, a docs row) is checked, computed, listed and given flags everywhere, with no
other file touched; the docs table lists exactly the catalogue."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from pydantic import BaseModel, ConfigDict, Field

from reweighter.cli import _advantage_params, build_parser
from reweighter.engine import ReweightEngine
from reweighter.engine.compute import raw_advantages
from reweighter.errors import InvalidInput
from reweighter.methods import advantages
from reweighter.methods.estimators import ESTIMATORS, EstimatorSpec, estimator_names
from reweighter.types import Group, ReweightRequest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "methods.md"


class ToyParams(BaseModel):
    """The toy estimator's `advantage_params`."""

    model_config = ConfigDict(extra="forbid")
    scale: float = Field(2.0, gt=0, description="what the centred rewards are multiplied by")
    top: int = Field(1, ge=1, description="a parameter bounded by the group's size")


def toy_apply(b, params: ToyParams) -> torch.Tensor:  # noqa: ANN001 - a methods._checks.Batch
    """The toy estimator's kernel: scale * (r - mean(r))."""
    return b.unbatch(params.scale * b.centred())


TOY = EstimatorSpec(
    "toy", "scaled centred rewards (a test's)", params=f"{__name__}:ToyParams",
    kernel=f"{__name__}:toy_apply", methods=("dra", "none"), within_group="top",
)  # fmt: skip


def reweight_help() -> str:
    sub = next(a for a in build_parser()._subparsers._group_actions)  # noqa: SLF001
    return sub.choices["reweight"].format_help()


def docs_rows() -> set[str]:
    text = DOCS.read_text().split("<!-- estimators -->", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", text, re.M))


def test_the_docs_table_lists_the_catalogue() -> None:
    assert docs_rows() == set(estimator_names())


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> EstimatorSpec:
    monkeypatch.setitem(ESTIMATORS, "toy", TOY)  # step 2 of the recipe: one entry
    return TOY


def test_an_estimator_added_by_the_recipe_is_served_everywhere(
    toy: EstimatorSpec, engine: ReweightEngine
) -> None:
    r = [1.0, 0.0, 0.5]
    emb = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]
    req = ReweightRequest([Group(rewards=r, embeddings=emb)], "none", {}, "toy", {"scale": 3.0})
    got = engine.reweight(req).groups[0].advantages
    assert got == pytest.approx([3.0 * (x - 0.5) for x in r], abs=1e-6)
    assert "toy" in engine.info()["advantages"]
    assert advantages(torch.tensor(r), "toy", scale=3.0).tolist() == pytest.approx(got)
    assert raw_advantages(r, "toy", {"scale": 3.0, "top": 9}) == pytest.approx(got)  # capped
    for bad, field in [
        (ReweightRequest([Group(rewards=r, embeddings=emb)], "none", {}, "toy", {"scale": -1}),
         "advantage_params.scale"),
        (ReweightRequest([Group(rewards=r, embeddings=emb)], "none", {}, "toy", {"top": 4}),
         "advantage_params.top"),
        (ReweightRequest([Group(rewards=r, embeddings=emb)], "mmr", {}, "toy", {}),
         "advantages"),
    ]:  # fmt: skip
        with pytest.raises(InvalidInput) as e:
            engine.reweight(bad)
        assert e.value.field == field
    usage = reweight_help()
    assert "--toy-scale VALUE" in usage and "--toy-top TOP" in usage and ",toy}" in usage
    args = build_parser().parse_args(["reweight", "in", "out", "--toy-scale", "3"])
    assert _advantage_params(args) == {"scale": 3}
    assert docs_rows() != set(estimator_names())  # step 3, its docs row, is not optional


def test_pass_at_k_keeps_its_flags_and_rules(engine: ReweightEngine) -> None:
    usage = reweight_help()
    assert "--pass-k K" in usage and "--pass-success-threshold VALUE" in usage
    req = ReweightRequest([Group(rewards=[1.0, 0.0], embeddings=[[1.0, 0.0], [0.0, 1.0]])],
                          "dra", {}, "pass_at_k", {"k": 1})  # fmt: skip
    with pytest.raises(InvalidInput) as e:
        engine.reweight(req)
    assert e.value.field == "advantages" and "goes with method 'none'" in e.value.message
