"""A request's `quality` (issue 49) in the engine: judged in its one validation path, each error
naming the field, and reweighted as the catalogue's `MethodSpec.run` says, group by group."""

from __future__ import annotations

import math

import pytest

from reweighter.config import Settings
from reweighter.engine import ReweightEngine
from reweighter.errors import InvalidInput
from reweighter.types import Group, ReweightRequest

E = [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]  # three copies, one orthogonal
EPS = 1e-6


@pytest.fixture
def engine() -> ReweightEngine:
    """Embeddings-only requests: no model is loaded."""
    return ReweightEngine(Settings(), method_device="cpu")


def ask(engine: ReweightEngine, *groups: Group, method: str = "dra") -> list[list[float]]:
    res = engine.reweight(ReweightRequest(groups=list(groups), method=method))
    return [g.rewards for g in res.groups]


@pytest.mark.parametrize(
    ("quality", "field", "says"),
    [
        ([1.0, 1.0, 1.0], "groups[1].quality", "has 3 items but rewards has 4"),
        ([1.0, 1.0, math.nan, 0.0], "groups[1].quality[2]", "must be finite"),
        ([1.0, 1.0, "x", 0.0], "groups[1].quality[2]", "must be a number"),
        ("1110", "groups[1].quality", "must be a list of numbers"),
        ([1.0, 1.0, -1.7e308, 0.0], "groups[1].quality[2]", "overflows"),
    ],
)
def test_a_bad_quality_is_refused_naming_the_field(
    engine: ReweightEngine, quality: object, field: str, says: str
) -> None:
    good = Group([1.0] * 4, embeddings=E)
    bad = Group([2.0, 2.0, 1.7e308, 1.0], embeddings=E, quality=quality)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as e:
        ask(engine, good, bad)
    assert e.value.field == field
    assert says in str(e.value)


def test_quality_is_scaled_and_the_rest_added_per_group(engine: ReweightEngine) -> None:
    # DRA: row sums 3, 3, 3, 1. Whole reward [2, 2, 2, 1]: 2/3 each for the copies, 1 for the
    # orthogonal one. Quality [1, 1, 1, 0] and format 1 each: 1/3 + 1 each, 0 + 1.
    whole = Group([2.0, 2.0, 2.0, 1.0], embeddings=E)
    split = Group([2.0, 2.0, 2.0, 1.0], embeddings=E, quality=[1.0, 1.0, 1.0, 0.0])
    a, b = ask(engine, whole, split)
    assert a == pytest.approx([2 / (3 + EPS)] * 3 + [1 / (1 + EPS)])
    assert b == pytest.approx([1 / (3 + EPS) + 1] * 3 + [1.0])
    # A group without quality is reweighted as if no group had one (the lift is per group).
    assert ask(engine, whole) == [a]


@pytest.mark.parametrize("method", ["dra", "mmr", "darling", "none"])
def test_a_right_completion_never_ends_below_a_wrong_one(
    engine: ReweightEngine, method: str
) -> None:
    # picktwo's shape: item 0 right but unformatted, item 3 wrong but formatted.
    g = Group(
        [1.2, 2.2, 2.2, 0.98],
        embeddings=E,
        quality=[1.2, 1.2, 1.2, -0.02],
        answers=["a", "a", "a", "b"],
    )
    (out,) = ask(engine, g, method=method)
    assert min(out[:3]) >= out[3]
