"""The methods on small groups worked out by hand, every ValueError, and the registry."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch

from reweighter.errors import InvalidInput
from reweighter.methods import (
    ADVANTAGE_KINDS,
    CATALOG,
    DraParams,
    MmrParams,
    NoneParams,
    advantages,
    cosine_similarity,
    dra,
    get_method,
    mean_pairwise_similarity,
    mmr,
)

EPS = 1e-6


def t(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def close(actual: torch.Tensor, expected, tol: float = 1e-5) -> None:
    torch.testing.assert_close(
        actual, torch.as_tensor(expected, dtype=actual.dtype), atol=tol, rtol=tol
    )


# Three unit vectors 0°, 126.87°, 233.13° apart: s12 = s13 = -0.6, s23 = 0.36 - 0.64 = -0.28.
SPREAD = t([1.0, 0.0], [-0.6, 0.8], [-0.6, -0.8])


# --- similarity -------------------------------------------------------------------------------


def test_cosine_similarity_normalises_first() -> None:
    # (2, 0) and (3, 4) have norms 2 and 5: cos = (2*3 + 0*4) / (2*5) = 0.6.
    s = cosine_similarity(t([2.0, 0.0], [3.0, 4.0]))
    close(s, [[1.0, 0.6], [0.6, 1.0]])


def test_cosine_similarity_of_half_precision_is_float32() -> None:
    s = cosine_similarity(t([2.0, 0.0], [3.0, 4.0]).half())
    assert s.dtype == torch.float32
    close(s, [[1.0, 0.6], [0.6, 1.0]], tol=1e-3)


def test_cosine_similarity_survives_tiny_and_huge_vectors() -> None:
    # (1, 0) and (1, 1) at any scale: cos = 1 / sqrt(2). At 1e-30 the squared norms underflow
    # float32, at 1e30 they overflow it; the direction is still well defined.
    c = 1 / math.sqrt(2)
    for scale in (1e-30, 1e30):
        close(cosine_similarity(t([1.0, 0.0], [1.0, 1.0]) * scale), [[1.0, c], [c, 1.0]])
        close(dra(t(1.0, 1.0), t([1.0, 0.0], [1.0, 1.0]) * scale), [1 / (1 + c + EPS)] * 2)


def test_cosine_similarity_masks_rows_and_columns() -> None:
    e = torch.stack([SPREAD, torch.tensor([[1.0, 0.0], [0.0, 1.0], [float("nan"), 0.0]])])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    s = cosine_similarity(e, mask)
    close(s[1], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])


def test_mean_pairwise_similarity_by_hand() -> None:
    # Pairs (1,2), (1,3), (2,3): (-0.6 - 0.6 - 0.28) / 3 = -0.493333
    close(mean_pairwise_similarity(cosine_similarity(SPREAD)), -1.48 / 3)
    # Batched with a ragged second group of 2 identical vectors (one pair, s = 1) and a group of
    # one (no pairs: 1.0 by definition).
    e = torch.stack([SPREAD, t([1.0, 1.0], [2.0, 2.0], [0.0, 1.0]), t([0.0, 1.0], [1, 0], [1, 0])])
    mask = torch.tensor([[True, True, True], [True, True, False], [True, False, False]])
    close(mean_pairwise_similarity(cosine_similarity(e, mask), mask), [-1.48 / 3, 1.0, 1.0])


# --- DRA --------------------------------------------------------------------------------------


def test_dra_two_items() -> None:
    # s12 = 0.6: r1 = 1 / (1 + 0.6 + eps) = 0.625, r2 = 0.5 / 1.6 = 0.3125
    close(dra(t(1.0, 0.5), t([1.0, 0.0], [0.6, 0.8])), [1 / (1.6 + EPS), 0.5 / (1.6 + EPS)])


def test_dra_duplicates_share_their_reward() -> None:
    # Items 1 and 2 point the same way (s12 = 1), item 3 is orthogonal to both (s = 0):
    # r1 = 1 / (1 + 1) = 0.5, r2 = 1 / 2 = 0.5, r3 = 1 / (1 + 0 + 0) = 1.
    e = t([1.0, 0.0, 0.0], [3.0, 0.0, 0.0], [0.0, 2.0, 0.0])
    close(dra(t(1.0, 1.0, 1.0), e), [1 / (2 + EPS), 1 / (2 + EPS), 1 / (1 + EPS)])


def test_dra_sign_case_floor_keeps_sign_none_flips_it() -> None:
    r = t(1.0, 0.5, -2.0)
    # Row sums without a floor: item 1: 1 - 0.6 - 0.6 = -0.2 (negative!),
    # item 2: -0.6 + 1 - 0.28 = 0.12, item 3: -0.6 - 0.28 + 1 = 0.12.
    # The penalty -2.0 is kept as it is whatever the floor (DRA's rule for r <= 0, issue 49).
    raw = dra(r, SPREAD, similarity_floor=None)
    close(raw, [1 / (-0.2 + EPS), 0.5 / (0.12 + EPS), -2.0], tol=1e-4)
    assert raw[0] < 0  # the correct, most distinct answer is punished: the authors' behaviour
    # Floor 0: every negative similarity counts as 0, each row sum is 1, nothing changes.
    floored = dra(r, SPREAD)
    close(floored, [1 / (1 + EPS), 0.5 / (1 + EPS), -2.0])
    assert torch.equal(torch.sign(floored), torch.sign(r))
    # Floor 0.5: each off-diagonal counts as 0.5, each row sum is 1 + 0.5 + 0.5 = 2.
    close(dra(r, SPREAD, similarity_floor=0.5), [1 / (2 + EPS), 0.5 / (2 + EPS), -2.0])


def test_dra_on_similarities_ignores_the_diagonal() -> None:
    # s_ii is 1 by definition whatever the matrix says: r1 = 2 / (1 + 0.5) = 1.333333
    sim = t([7.0, 0.5], [0.5, -3.0])
    close(dra(t(2.0, 3.0), sim=sim), [2 / (1.5 + EPS), 3 / (1.5 + EPS)])


def test_dra_ragged_mask() -> None:
    # Group 2 has two valid items, identical (r / 2 each); its third slot is padding with a NaN
    # reward and NaN embedding, which must be ignored and come back as 0.
    e = torch.stack([SPREAD, torch.tensor([[1.0, 0.0], [5.0, 0.0], [float("nan")] * 2])])
    r = torch.tensor([[1.0, 1.0, 1.0], [4.0, 2.0, float("nan")]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    out = dra(r, e, mask=mask)
    close(out, [[1 / (1 + EPS)] * 3, [4 / (2 + EPS), 2 / (2 + EPS), 0.0]])


def test_dra_group_of_one() -> None:
    close(dra(t(3.0), t([0.2, 0.1])), [3 / (1 + EPS)])


# --- MMR --------------------------------------------------------------------------------------


def test_mmr_explicit_lambda_prefers_the_novel_item() -> None:
    # Items 1 and 2 identical (s12 = 1), item 3 orthogonal to both. r = (1.0, 0.8, 0.6), λ = 0.7.
    # Step 0: item 1 has the highest reward and keeps 1.0.
    # Step 1: item 2: 0.7*0.8 - 0.3*max(0, 1) = 0.56 - 0.30 = 0.26
    #         item 3: 0.7*0.6 - 0.3*max(0, 0) = 0.42          -> item 3 selected, reward 0.42
    # Step 2: item 2: redundancy max(0, s21 = 1, s23 = 0) = 1 -> 0.26
    e = t([1.0, 0.0], [2.0, 0.0], [0.0, 1.0])
    out, lam = mmr(t(1.0, 0.8, 0.6), e, lam=0.7)
    close(out, [1.0, 0.26, 0.42])
    assert lam.shape == () and math.isclose(lam.item(), 0.7, rel_tol=1e-6)


def test_mmr_adaptive_lambda() -> None:
    # r = (1, 0, 1, 0): mean 0.5, population std sqrt(4 * 0.25 / 4) = 0.5,
    # λ = sigmoid(0.5) = 1 / (1 + e^-0.5) = 0.6224593, 1 - λ = 0.3775407.
    # Embeddings e1 = (1, 0), e2 = (0, 1), e3 = (1, 0), e4 = (0.6, 0.8):
    # s12 = 0, s13 = 1, s14 = 0.6, s23 = 0, s24 = 0.8, s34 = 0.6.
    # Step 0: items 1 and 3 tie at 1, and they are copies (e1 = e3: same similarities to the
    # rest, off-diagonal row sums 1.6): one of them keeps 1.
    # Step 1: item 2: λ*0 - (1-λ)*0 = 0; item 3: λ*1 - (1-λ)*1 = 2λ - 1 = 0.2449186;
    #         item 4: λ*0 - (1-λ)*0.6 = -0.2265244 -> item 3 selected, reward 0.2449186
    # Step 2: redundancy item 2: max(0, 0) = 0, item 4: max(0.6, s43 = 0.6) = 0.6:
    #         item 2: 0, item 4: -0.2265244 -> item 2 selected, reward 0
    # Step 3: item 4: redundancy max(0.6, s42 = 0.8) = 0.8 -> -(1-λ)*0.8 = -0.3020326
    lam = 1 / (1 + math.exp(-0.5))
    e = t([1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8])
    out, lam_used = mmr(t(1.0, 0.0, 1.0, 0.0), e)
    assert math.isclose(lam_used.item(), lam, rel_tol=1e-6)
    # Nothing tells the copies apart, so they share: each gets (1 + (2λ - 1)) / 2 = λ.
    close(out, [lam, 0.0, lam, -(1 - lam) * 0.8])


def test_mmr_ties_go_by_content_and_negative_similarity_counts_as_zero() -> None:
    # Equal rewards, diversified, λ = 0.5. Off-diagonal row sums: item 1 -1.2, items 2 and 3
    # -0.88: item 1 is the least like its group and goes first, keeping 0.5.
    # Item 2 (s21 = -0.6) and item 3 (s31 = -0.6): both 0.25 - 0.5*max(0, -0.6) = 0.25.
    # Item 3 (or 2): redundancy max(0, -0.6, s32 = -0.28) = 0 -> 0.25.
    out, lam = mmr(t(0.5, 0.5, 0.5), SPREAD, lam=0.5, equal_rewards="diversify")
    close(out, [0.5, 0.25, 0.25])
    # Adaptive on equal rewards: std 0, λ = sigmoid(0) = 0.5: the same answer.
    out2, lam2 = mmr(t(0.5, 0.5, 0.5), SPREAD, equal_rewards="diversify")
    close(out2, [0.5, 0.25, 0.25])
    assert lam2.item() == 0.5
    # By default a group whose rewards all agree is left as it is (λ = 1).
    out3, lam3 = mmr(t(0.5, 0.5, 0.5), SPREAD)
    close(out3, [0.5, 0.5, 0.5])
    assert lam3.item() == 1.0


def test_mmr_batched_ragged_and_group_of_one() -> None:
    # Group 1: the explicit-λ case above. Group 2: one valid item (of three slots): it is
    # selected first and keeps 5; padding gets 0.
    e = torch.stack([t([1.0, 0.0], [2.0, 0.0], [0.0, 1.0]), t([0.0, 1.0], [0, 0], [0, 0])])
    r = t([1.0, 0.8, 0.6], [5.0, 9.0, 9.0])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    out, lam = mmr(r, e, mask=mask, lam=0.7)
    close(out, [[1.0, 0.26, 0.42], [5.0, 0.0, 0.0]])
    close(lam, [0.7, 1.0])  # a group of one has nothing to trade: left as it is, λ = 1


def test_mmr_lambda_one_is_plain_rewards_and_zero_is_pure_novelty() -> None:
    e = t([1.0, 0.0], [2.0, 0.0], [0.0, 1.0])
    out, _ = mmr(t(1.0, 0.8, 0.6), e, lam=1.0)
    close(out, [1.0, 0.8, 0.6])
    # λ = 0: item 1 keeps 1.0; item 2 scores -1, item 3 scores 0 -> item 3 (0), then item 2 (-1).
    out, _ = mmr(t(1.0, 0.8, 0.6), e, lam=0)
    close(out, [1.0, -1.0, 0.0])


# --- advantages -------------------------------------------------------------------------------


def test_advantages_by_hand() -> None:
    r = t(1.0, 0.0, 0.0, 1.0)
    # mean 0.5; sample std sqrt(4 * 0.25 / 3) = 0.5773503; 0.5 / (0.5773503 + 1e-4) = 0.8658752
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    close(advantages(r, "grpo"), [a, -a, -a, a])
    close(advantages(r, "dr_grpo"), [0.5, -0.5, -0.5, 0.5])
    close(advantages(r, "none"), [1.0, 0.0, 0.0, 1.0])


def test_advantages_ragged_and_degenerate_groups() -> None:
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 4.0, float("nan"), 0.0], [3.0, 3.0, 3.0, 3.0]])
    mask = torch.tensor([[True] * 4, [True, True, False, False], [True] * 4])
    # Group 2: (2, 4): mean 3, sample std sqrt((1 + 1) / 1) = 1.4142136 -> ±1 / 1.4143136.
    # Group 3: all equal: std 0, advantages 0 / 1e-4 = 0.
    a, b = 0.5 / (math.sqrt(1 / 3) + 1e-4), 1 / (math.sqrt(2) + 1e-4)
    close(advantages(r, "grpo", mask=mask), [[a, -a, -a, a], [-b, b, 0, 0], [0, 0, 0, 0]])
    close(advantages(r, "dr_grpo", mask=mask)[1], [-1.0, 1.0, 0.0, 0.0])


def test_advantage_of_a_group_of_one_is_zero() -> None:
    # One completion: no sample std, no relative signal: advantage 0 (documented), not NaN.
    assert advantages(t(0.7), "grpo").tolist() == [0.0]
    assert advantages(t(0.7), "dr_grpo").tolist() == [0.0]
    mask = torch.tensor([[True, False]])
    assert advantages(t([0.7, 0.1]), "grpo", mask=mask).tolist() == [[0.0, 0.0]]


# --- every ValueError -------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
E3 = SPREAD
R3 = t(1.0, 0.0, 1.0)


@pytest.mark.parametrize(
    ("call", "field", "match"),
    [
        (lambda: dra(torch.zeros(1, 1, 3), E3), "rewards", r"\[G\] or \[B, G\]"),
        (lambda: dra(R3, t([1.0, 0.0], [0.0, 1.0])), "embeddings", r"expected \[3, D > 0\]"),
        (lambda: dra(R3, t(1.0, 2.0, 3.0)), "embeddings", r"\[G, D\]"),
        (lambda: dra(R3.unsqueeze(0), E3), "embeddings", r"\[B, G, D\]"),
        (lambda: dra(R3, torch.zeros(3, 0)), "embeddings", r"does not match"),
        (lambda: dra(R3, sim=torch.eye(3)[:, :2]), "similarity", r"expected \[3, 3\]"),
        (lambda: mmr(R3, sim=torch.eye(2)), "similarity", r"does not match"),
        (lambda: dra(t(1.0, NAN, 1.0), E3), "rewards", r"NaN or inf at item 1"),
        (
            lambda: mmr(t([1.0, 0, 1], [0, 0, INF]), E3.expand(2, 3, 2)),
            "rewards",
            "group 1, item 2",
        ),
        (lambda: advantages(t(-INF, 1.0), "grpo"), "rewards", r"NaN or inf at item 0"),
        (lambda: dra(R3, t([1.0, 0.0], [NAN, 0.0], [0.0, 1.0])), "embeddings", r"NaN or inf"),
        (lambda: mmr(R3, t([1.0, 0.0], [0.0, INF], [0.0, 1.0])), "embeddings", r"NaN or inf"),
        (lambda: dra(R3, t([1.0, 0.0], [0.0, 0.0], [0.0, 1.0])), "embeddings", r"zero-norm.*1"),
        (lambda: cosine_similarity(t([0.0, 0.0])), "embeddings", r"zero-norm"),
        (lambda: dra(torch.zeros(0), torch.zeros(0, 4)), "rewards", r"empty group"),
        (lambda: advantages(torch.zeros(2, 0), "grpo"), "rewards", r"empty group"),
        (
            lambda: dra(R3, E3, mask=torch.tensor([False, False, False])),
            "mask",
            r"no valid items",
        ),
        (
            lambda: mmr(
                R3.expand(2, 3),
                E3.expand(2, 3, 2),
                mask=torch.tensor([[1, 1, 1], [0, 0, 0]]).bool(),
            ),
            "mask",
            r"group 1 has no valid items",
        ),
        (lambda: dra(R3, E3, mask=torch.ones(3)), "mask", r"boolean"),
        (lambda: dra(R3, E3, mask=torch.ones(2, 3, dtype=torch.bool)), "mask", r"does not match"),
        (lambda: mmr(R3, E3, lam=1.5), "lam", r"\[0, 1\]"),
        (lambda: mmr(R3, E3, lam=-0.1), "lam", r"\[0, 1\]"),
        (lambda: mmr(R3, E3, lam=NAN), "lam", r"\[0, 1\]"),
        (lambda: mmr(R3, E3, lam="fast"), "lam", r"adaptive"),
        (lambda: mmr(R3, sim=torch.eye(3), lam=True), "lam", r"adaptive"),
        (lambda: dra(R3, E3, similarity_floor=2.0), "similarity_floor", r"\[-1, 1\]"),
        (lambda: dra(R3, E3, similarity_floor=NAN), "similarity_floor", r"\[-1, 1\]"),
        (lambda: dra(R3, E3, eps=0.0), "eps", r"> 0"),
        (lambda: dra(R3, E3, eps=INF), "eps", r"> 0"),
        (lambda: advantages(R3, "ppo"), "kind", r"unknown.*grpo, dr_grpo, pass_at_k, none"),
        (
            lambda: get_method("grpo"),
            "method",
            r"unknown method 'grpo'; known: dra, mmr, darling, outcome_ucb, none",
        ),
        (lambda: dra(t(1.0, 1.0), sim=t([1.0, NAN], [NAN, 1.0])), "similarity", "NaN"),
        (lambda: mmr(t(1.0, 1.0), sim=t([1.0, INF], [INF, 1.0])), "similarity", "NaN"),
        # No floor and a row sum of exactly -eps: the denominator vanishes; refuse, never inf.
        (
            lambda: dra(
                t(1.0, 1.0), sim=t([1, -1.5], [-1.5, 1]), similarity_floor=None, eps=0.5
            ),
            "similarity_floor",
            r"vanishes at item 0",
        ),
        (lambda: dra([[1.0, "x"]], E3), "rewards", r"tensor of numbers"),
    ],
)
def test_value_errors_name_the_problem(call, field: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert isinstance(info.value, InvalidInput)
    assert info.value.field == field


def test_masked_padding_may_hold_anything() -> None:
    # NaN rewards, NaN and zero-norm embeddings in masked slots are not errors: they are unused.
    r = t(1.0, NAN, NAN)
    e = t([1.0, 0.0], [NAN, NAN], [0.0, 0.0])
    mask = torch.tensor([True, False, False])
    close(dra(r, e, mask=mask), [1 / (1 + EPS), 0.0, 0.0])
    out, lam = mmr(r, e, mask=mask)
    close(out, [1.0, 0.0, 0.0])
    assert lam.item() == 1.0  # one valid item: its rewards all agree, left as it is


# --- registry and parameter models ------------------------------------------------------------


def test_registry_lists_the_methods_and_kinds() -> None:
    assert set(CATALOG) == {"dra", "mmr", "darling", "outcome_ucb", "none"}
    assert ADVANTAGE_KINDS == ("grpo", "dr_grpo", "pass_at_k", "none")
    names = ("dra", "mmr", "darling", "outcome_ucb", "none")
    assert [CATALOG[n].needs_similarity for n in names] == [True, True, True, False, False]
    for name, spec in CATALOG.items():
        assert spec.name == name and get_method(name) is spec and spec.description
    assert CATALOG["dra"].params_model is DraParams
    assert CATALOG["mmr"].params_model is MmrParams
    assert CATALOG["none"].params_model is NoneParams


def test_registry_apply_matches_the_functions() -> None:
    r = t([1.0, 0.8, 0.6], [0.5, 0.5, 0.5])
    e = torch.stack([t([1.0, 0.0], [2.0, 0.0], [0.0, 1.0]), SPREAD])
    sim = cosine_similarity(e)
    out, lam = CATALOG["dra"].apply(r, sim, None, DraParams())
    assert lam is None
    close(out, [[0.5, 0.4, 0.6], [0.5, 0.5, 0.5]], tol=1e-5)  # 1/2, 0.8/2, 0.6/1; no change
    out, lam = CATALOG["dra"].apply(r, sim, None, DraParams(similarity_floor=None))
    close(out[1], [0.5 / -0.2, 0.5 / 0.12, 0.5 / 0.12], tol=1e-4)
    out, lam = CATALOG["mmr"].apply(r, sim, None, MmrParams.model_validate({"lambda": 0.7}))
    close(out[0], [1.0, 0.26, 0.42])
    close(lam, [0.7, 1.0])  # a group of one has nothing to trade: left as it is, λ = 1
    mask = torch.tensor([[True, False, True], [True, True, True]])
    out, lam = CATALOG["none"].apply(r, None, mask, NoneParams())
    assert lam is None
    close(out, [[1.0, 0.0, 0.6], [0.5, 0.5, 0.5]])
    with pytest.raises(ValueError, match="needs the similarity"):
        CATALOG["mmr"].apply(r, None, None, MmrParams())


def test_param_models_defaults_alias_and_serialisation() -> None:
    assert DraParams().similarity_floor == 0.0 and DraParams().eps == 1e-6
    assert DraParams.model_validate({"similarity_floor": None}).similarity_floor is None
    assert MmrParams().lam == "adaptive"
    assert MmrParams.model_validate({"lambda": 0.3}).lam == 0.3
    assert MmrParams.model_validate({"lam": 1}).lam == 1.0  # populate by name
    assert MmrParams.model_validate_json('{"lambda": "adaptive"}').lam == "adaptive"
    assert MmrParams(lam=0.25).model_dump() == {"lambda": 0.25, "equal_rewards": "keep"}
    assert MmrParams(lam=0.25).model_dump_json() == '{"lambda":0.25,"equal_rewards":"keep"}'
    schema = MmrParams.model_json_schema()
    assert set(schema["properties"]) == {"lambda", "equal_rewards"}
    assert NoneParams.model_validate({}).model_dump() == {}


@pytest.mark.parametrize(
    ("model", "params", "loc", "match"),
    [
        (MmrParams, {"lambda": 1.5}, "lambda", r'a number in \[0, 1\] or "adaptive", got 1.5'),
        (MmrParams, {"lambda": "greedy"}, "lambda", r"got 'greedy'"),
        (MmrParams, {"lambda": True}, "lambda", r"got True"),
        (MmrParams, {"lambda": float("nan")}, "lambda", r"got nan"),
        (MmrParams, {"lambda": 0.5, "beta": 1}, "beta", r"Extra inputs are not permitted"),
        (DraParams, {"similarity_floor": float("inf")}, "similarity_floor", r"finite"),
        (DraParams, {"similarity_floor": -3}, "similarity_floor", r"greater than or equal to -1"),
        (DraParams, {"eps": 0}, "eps", r"greater than 0"),
        (DraParams, {"floor": 0.1}, "floor", r"Extra inputs"),
        (NoneParams, {"lambda": 0.5}, "lambda", r"Extra inputs"),
    ],
)
def test_param_models_reject_cleanly(model, params, loc: str, match: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        model.model_validate(params)
    errors = info.value.errors()
    assert len(errors) == 1, errors  # one clean message, not one per union branch
    assert errors[0]["loc"] == (loc,)
    assert pytest.importorskip("re").search(match, errors[0]["msg"]), errors[0]["msg"]
