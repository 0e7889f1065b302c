"""Position never decides: DRA and MMR on permuted groups give permuted answers, ties included.

The cases the issue found (issue 22): with tied rewards MMR's first pick used to be the lowest
index, which kept its raw reward while its siblings paid for their similarity to it, so an
all-wrong group pushed completion 0 by about +2.4 in advantage, and two correct answers got
+2.21 / +0.78 by where they stood.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reweighter.errors import InvalidInput
from reweighter.methods import advantages, dra, mmr
from reweighter.methods.params import MmrParams

FAST = settings(max_examples=80, deadline=None)


def close(got: torch.Tensor, want: list[float], tol: float = 1e-6) -> None:
    torch.testing.assert_close(got, torch.tensor(want, dtype=got.dtype), atol=tol, rtol=tol)


# --- hand-computed cases ----------------------------------------------------------------------

# Three wrong answers; s12 = 0.9, s13 = 0.2, s23 = 0.5. Off-diagonal row sums: item 1 1.1,
# item 2 1.4, item 3 0.7: item 3 is the least like its group.
S3 = torch.tensor([[1.0, 0.9, 0.2], [0.9, 1.0, 0.5], [0.2, 0.5, 1.0]])


def test_all_wrong_group_is_left_alone_by_default() -> None:
    out, lam = mmr(torch.zeros(3), sim=S3)
    close(out, [0.0, 0.0, 0.0])
    assert lam.item() == 1.0  # the λ it was left with: every reward unchanged
    close(advantages(out, "grpo"), [0.0, 0.0, 0.0])  # as GRPO gives


def test_all_wrong_group_diversified_goes_by_content() -> None:
    # λ = sigmoid(0) = 0.5. Item 3 (least similar to the group) goes first and keeps 0.
    # Step 1: item 1: 0.5*0 - 0.5*max(0, s13 = 0.2) = -0.1; item 2: -0.5*0.5 = -0.25 -> item 1.
    # Step 2: item 2: redundancy max(s23 = 0.5, s21 = 0.9) = 0.9 -> -0.45.
    # (First index first, as before, would have given item 1 the 0: [0, -0.45, -0.1].)
    out, lam = mmr(torch.zeros(3), sim=S3, equal_rewards="diversify")
    close(out, [-0.1, -0.45, 0.0])
    assert lam.item() == 0.5
    for perm in ([2, 0, 1], [1, 2, 0], [2, 1, 0]):
        p = torch.tensor(perm)
        out_p, _ = mmr(
            torch.zeros(3), sim=S3[p][:, p], equal_rewards="diversify"
        )
        close(out_p, out[p].tolist())


def test_two_correct_answers_are_ordered_by_content_not_position() -> None:
    # r = (1, 1, 0, 0); s12 = 0.8, s13 = 0.7, s14 = 0.6, s23 = 0.1, s24 = 0.2, s34 = 0.5.
    # Row sums: item 1 2.1, item 2 1.1: of the two correct answers item 2 is the less redundant
    # and goes first (the first index, item 1, went first before).
    # λ = sigmoid(pstd = 0.5) = 0.6224593, c = 1 - λ = 0.3775407.
    # Step 1: item 1: λ - c*0.8 = 0.3204267; item 3: -c*0.1 = -0.0377541; item 4: -c*0.2 -> item 1
    # Step 2: item 3: -c*max(0.1, 0.7) = -0.2642785; item 4: -c*max(0.2, 0.6) = -0.2265244 -> 4
    # Step 3: item 3: -c*max(0.7, 0.1, 0.5) = -0.2642785.
    s = torch.tensor(
        [[1.0, 0.8, 0.7, 0.6], [0.8, 1.0, 0.1, 0.2], [0.7, 0.1, 1.0, 0.5], [0.6, 0.2, 0.5, 1.0]]
    )
    r = torch.tensor([1.0, 1.0, 0.0, 0.0])
    out, lam = mmr(r, sim=s)
    lam_v, c = 0.6224593, 0.3775407
    close(out, [lam_v - c * 0.8, 1.0, -c * 0.7, -c * 0.6])
    for perm in ([1, 0, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
        p = torch.tensor(perm)
        out_p, _ = mmr(r[p], sim=s[p][:, p])
        close(out_p, out[p].tolist())


def test_the_issue_case_the_push_follows_the_content() -> None:
    """An all-wrong group of 8 (the 0/1 reward's most common group at low accuracy): by default
    every advantage is 0; diversified, the one unpenalised member (about +2.4 in advantage) is
    the least redundant one wherever it stands, never member 0 by default."""
    gen = torch.Generator().manual_seed(3)
    e = torch.randn(8, 16, generator=gen) + 2.0  # alike, as completions of one prompt are
    e[5] = torch.randn(16, generator=gen) - 2.0  # one unlike the rest
    out, _ = mmr(torch.zeros(8), e)
    assert (advantages(out, "grpo") == 0).all()
    out, _ = mmr(torch.zeros(8), e, equal_rewards="diversify")
    adv = advantages(out, "grpo")
    # Member 5 keeps 0 and leads (members whose only likeness to it is negative may tie it:
    # redundancy counts from 0); member 0 is penalised like the rest.
    assert out[5] == 0.0 and adv[5] == adv.max() and adv[5] > 1.0 and adv[0] < 0
    for seed in range(5):
        p = torch.randperm(8, generator=torch.Generator().manual_seed(seed))
        out_p, _ = mmr(torch.zeros(8), e[p], equal_rewards="diversify")
        torch.testing.assert_close(out_p, out[p], atol=1e-6, rtol=1e-6)


def test_copies_share_what_their_places_got() -> None:
    # Items 1 and 2 are copies (same direction), item 3 orthogonal; r = (1, 1, 0), λ = 0.6.
    # One copy goes first and keeps 1; step 1: the other copy 0.6 - 0.4*1 = 0.2, item 3: 0 ->
    # the copy (0.2); step 2: item 3: 0. Nothing tells the copies apart: each gets (1 + 0.2)/2.
    e = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 1.0]])
    out, _ = mmr(torch.tensor([1.0, 1.0, 0.0]), e, lam=0.6)
    close(out, [0.6, 0.6, 0.0])
    # Total as the greedy hands it out: 1 + 0.2 + 0.
    assert out.sum().item() == pytest.approx(1.2)


def test_fixed_lambda_also_keeps_equal_groups_unless_asked() -> None:
    out, lam = mmr(torch.full((3,), 2.0), sim=S3, lam=0.3)
    close(out, [2.0, 2.0, 2.0])
    assert lam.item() == 1.0
    # diversify, λ = 0.3: item 3 keeps 2; item 1: 0.6 - 0.7*0.2 = 0.46, item 2: 0.6 - 0.35 = 0.25
    # -> item 1; item 2: 0.6 - 0.7*0.9 = -0.03.
    out, lam = mmr(torch.full((3,), 2.0), sim=S3, lam=0.3, equal_rewards="diversify")
    close(out, [0.46, -0.03, 2.0])
    assert lam.item() == pytest.approx(0.3)


def test_equal_rewards_is_validated_by_name() -> None:
    with pytest.raises(InvalidInput, match='"keep" or "diversify"') as err:
        mmr(torch.zeros(3), sim=S3, equal_rewards="paper")  # type: ignore[arg-type]
    assert err.value.field == "equal_rewards"
    assert MmrParams.model_validate({"equal_rewards": "diversify"}).equal_rewards == "diversify"
    assert MmrParams().equal_rewards == "keep"
    with pytest.raises(ValueError, match="equal_rewards"):
        MmrParams.model_validate({"equal_rewards": "yes"})


def test_the_engine_kernel_passes_the_option() -> None:
    """The catalogue's kernel (what HTTP, gRPC and the CLI run) honours equal_rewards."""
    from reweighter.methods import get_method

    spec = get_method("mmr")
    sim = S3.unsqueeze(0).double()
    r = torch.zeros(1, 3, dtype=torch.float64)
    for mode, want in (("keep", [0.0, 0.0, 0.0]), ("diversify", [-0.1, -0.45, 0.0])):
        params = spec.params_model.model_validate({"equal_rewards": mode})
        out, _ = spec.apply(r, sim, None, params)
        close(out[0], want)


# --- properties over random groups with ties --------------------------------------------------


@st.composite
def tied_groups(draw):
    """(rewards [1, G], embeddings [1, G, D], pairs of copies): rewards from a small set (ties
    everywhere), some members copies of others (same direction, another length), random
    directions otherwise."""
    g = draw(st.integers(2, 10))
    d = draw(st.integers(2, 6))
    levels = draw(st.sampled_from([[0.0, 1.0], [0.0], [-1.0, 0.5, 2.0], [3.0, 3.0, -0.7]]))
    r = torch.tensor([draw(st.sampled_from(levels)) for _ in range(g)])
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    e = torch.randn(g, d, generator=gen) + draw(st.sampled_from([0.0, 1.5]))
    root = list(range(g))
    for i in range(1, g):
        src = draw(st.integers(-g, i - 1))
        if src >= 0:  # a copy of an earlier member: same content, so same reward too
            e[i] = e[src] * draw(st.floats(0.5, 2.0))
            r[i] = r[src]
            root[i] = root[src]
    pairs = [(i, j) for i in range(g) for j in range(g) if i < j and root[i] == root[j]]
    return r.unsqueeze(0), e.unsqueeze(0), pairs


@FAST
@given(
    tied_groups(),
    st.randoms(use_true_random=False),
    st.sampled_from(["adaptive", 0.3, 0.7]),
    st.sampled_from(["keep", "diversify"]),
)
def test_mmr_is_permutation_equivariant_with_ties(data, rnd, lam, equal_rewards: str) -> None:
    r, e, _ = data
    perm = list(range(r.shape[1]))
    rnd.shuffle(perm)
    p = torch.tensor(perm)
    out, lam_used = mmr(r, e, lam=lam, equal_rewards=equal_rewards)
    out_p, lam_p = mmr(r[:, p], e[:, p], lam=lam, equal_rewards=equal_rewards)
    torch.testing.assert_close(out_p, out[:, p], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lam_p, lam_used, atol=1e-6, rtol=1e-6)
    adv, adv_p = advantages(out, "grpo"), advantages(out_p, "grpo")
    torch.testing.assert_close(adv_p, adv[:, p], atol=1e-4, rtol=1e-4)


@FAST
@given(tied_groups(), st.randoms(use_true_random=False), st.sampled_from([0.0, None]))
def test_dra_is_permutation_equivariant_with_ties(data, rnd, floor) -> None:
    r, e, _ = data
    perm = list(range(r.shape[1]))
    rnd.shuffle(perm)
    p = torch.tensor(perm)
    s = e / e.norm(dim=-1, keepdim=True)
    if floor is None and ((s @ s.transpose(1, 2)).sum(-1).abs().min() < 1e-2):
        return  # a vanishing denominator without a floor is an error, tested elsewhere
    out = dra(r, e, similarity_floor=floor)
    torch.testing.assert_close(dra(r[:, p], e[:, p], similarity_floor=floor), out[:, p],
                               atol=1e-5, rtol=1e-5)


@FAST
@given(tied_groups(), st.sampled_from(["adaptive", 0.5]))
def test_copies_get_equal_values_and_equal_groups_are_kept(data, lam) -> None:
    r, e, copies = data
    out, lam_used = mmr(r, e, lam=lam)
    for i, j in copies:
        assert out[0, i].item() == pytest.approx(out[0, j].item(), abs=1e-5)
    if r.max() == r.min():
        assert torch.equal(out, r) and lam_used.item() == 1.0


def test_the_cli_flag_reaches_the_kernel(tmp_path) -> None:
    """`reweighter reweight --equal-rewards diversify` (a flag generated from MmrParams)."""
    import json

    from reweighter.cli import main

    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    emb = [[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]  # s12 = 0.8, s13 = 0, s23 = 0.6
    src.write_text(json.dumps({"rewards": [0, 0, 0], "embeddings": emb}) + "\n")
    assert main(["reweight", str(src), str(dst), "--method", "mmr"]) == 0
    assert json.loads(dst.read_text())["reweighted_rewards"] == [0.0, 0.0, 0.0]
    argv = ["reweight", str(src), str(dst), "--method", "mmr", "--equal-rewards", "diversify"]
    assert main(argv) == 0
    # Row sums: item 1 0.8, item 2 1.4, item 3 0.6: item 3 first (0); then item 1: -0.5*0 = 0,
    # item 2: -0.5*0.6 = -0.3 -> item 1 (0); item 2: -0.5*max(0.6, 0.8) = -0.4.
    got = json.loads(dst.read_text())["reweighted_rewards"]
    assert got == pytest.approx([0.0, -0.4, 0.0], abs=1e-6)
