"""issue 49, item 1: right completions ranked below wrong ones, before and after `quality`.

Replays picktwo-main's logged DRA, MMR and Darling groups (reweighter_research.inversions: the
method as logged, as shipped on the whole reward, on the correctness term with the format term
added back, and as the service does with that quality) and holds the counts EXPERIMENTS.md
states. With quality given, as the service computes it, no mixed group of any arm ranks a right
completion below a wrong one."""

from __future__ import annotations

import pytest

from reweighter_research.inversions import penalty_shares, replay

TABLE = {
    "dra": {"mixed": 469, "logged": 2, "whole": 2, "scaled": 3, "quality": 0},
    "mmr": {"mixed": 464, "logged": 0, "whole": 0, "scaled": 2, "quality": 0},
    "darling": {"mixed": 466, "logged": 14, "whole": 12, "scaled": 0, "quality": 0},
}


def test_darling_with_quality_ranks_no_right_completion_below_a_wrong_one() -> None:
    # Darling's classes come from the answers: no encoder, seconds.
    assert replay(arms=("darling",)) == {"darling": TABLE["darling"]}


@pytest.mark.slow  # embeds the DRA and MMR arms' ~7,400 completions with MiniLM (~1 min here)
def test_dra_and_mmr_with_quality_rank_no_right_completion_below_a_wrong_one() -> None:
    # replay() also checks it is the run: the logged rewards where the rules agree, to 1e-3.
    table = replay(arms=("dra", "mmr"))
    assert table == {arm: TABLE[arm] for arm in ("dra", "mmr")}
    assert all(row["quality"] == 0 for row in table.values())


def test_the_dra_arm_shrank_its_penalties_and_the_mmr_arm_did_not() -> None:
    """Why DRA's rule changed: as run, it kept a median quarter of each negative base reward
    (every penalty divided by a similarity sum of ~4 among near-identical completions), so a
    collapsed wrong answer cost GRPO a quarter of a unique one's. MMR's novelty cost mostly
    grew its penalties; only λ shrank some (to 0.63 at least)."""
    dra = penalty_shares(arm="dra")
    assert dra["penalties"] == 273
    assert dra["median"] == pytest.approx(0.248, abs=1e-3)
    assert dra["min"] == pytest.approx(0.152, abs=1e-3)
    assert dra["below_half"] == pytest.approx(0.978, abs=1e-3)
    mmr = penalty_shares(arm="mmr")
    assert mmr["penalties"] == 282
    assert mmr["median"] == pytest.approx(1.602, abs=1e-3)
    assert mmr["min"] == pytest.approx(0.633, abs=1e-3)
    assert mmr["below_half"] == 0.0
