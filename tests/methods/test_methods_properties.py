"""Properties of the methods (hypothesis), against plain-Python references of the formulas."""

from __future__ import annotations

import importlib
import math
import statistics

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reweighter.methods import (
    advantages,
    cosine_similarity,
    dra,
    mmr,
)

FAST = settings(max_examples=60, deadline=None)

reward = st.floats(-10, 10, width=32, allow_nan=False)
coord = st.floats(-5, 5, width=32, allow_nan=False)


def vector(d: int) -> st.SearchStrategy[list[float]]:
    return st.lists(coord, min_size=d, max_size=d).filter(
        lambda v: math.sqrt(sum(x * x for x in v)) > 0.1
    )


@st.composite
def batches(draw, max_b: int = 4, max_g: int = 6, ragged: bool = True):
    """(rewards [B, G], embeddings [B, G, D], mask [B, G] or None), float32."""
    b = draw(st.integers(1, max_b))
    g = draw(st.integers(1, max_g))
    d = draw(st.integers(2, 5))
    r = torch.tensor(
        draw(st.lists(st.lists(reward, min_size=g, max_size=g), min_size=b, max_size=b))
    )
    e = torch.tensor(
        draw(st.lists(st.lists(vector(d), min_size=g, max_size=g), min_size=b, max_size=b))
    )
    mask = None
    if ragged and draw(st.booleans()):
        rows = draw(
            st.lists(
                st.lists(st.booleans(), min_size=g, max_size=g).filter(any), min_size=b, max_size=b
            )
        )
        mask = torch.tensor(rows)
        # Padding may hold anything: poison it to prove it is never read.
        r = r.masked_fill(~mask, float("nan"))
        e = e.masked_fill(~mask.unsqueeze(-1), float("nan"))
    return r, e, mask


def seeded(seed: int, b: int, g: int, d: int = 6, dtype=torch.float32):
    """Continuous random rewards and embeddings: exact ties have probability zero."""
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, g, generator=gen, dtype=dtype),
        torch.randn(b, g, d, generator=gen, dtype=dtype),
    )


# --- plain-Python references, straight from the formulas --------------------------------------


def ref_cos(e: list[list[float]]) -> list[list[float]]:
    n = [math.sqrt(sum(x * x for x in v)) for v in e]
    return [
        [
            sum(a * b for a, b in zip(u, v, strict=True)) / (nu * nv)
            for v, nv in zip(e, n, strict=True)
        ]
        for u, nu in zip(e, n, strict=True)
    ]


def ref_dra(r: list[float], s: list[list[float]], floor: float | None, eps: float) -> list[float]:
    out = []
    for i in range(len(r)):
        row = 0.0
        for j in range(len(r)):
            sij = 1.0 if i == j else s[i][j]
            row += sij if floor is None or i == j else max(sij, floor)
        out.append(r[i] / (row + eps) if r[i] > 0 else r[i])  # a penalty is kept (dra.py)
    return out


def ref_mmr(
    r: list[float], s: list[list[float]], lam: float, equal_rewards: str = "keep"
) -> list[float]:
    """The documented greedy: content tie-breaks (least similar to the group first, to 1e-5),
    copies share their values, a group of equal rewards kept as it is by default."""
    g, tie = len(r), 1e-5
    if equal_rewards == "keep" and max(r) == min(r):
        return list(r)
    off = [[0.0 if i == j else s[i][j] for j in range(g)] for i in range(g)]
    keys = ([sum(row) for row in off], [sum(x * x for x in row) for row in off])
    tol = tie + 16 * 2.0**-52 * max(abs(x) for x in r)

    def pick(score: list[float], free: list[int]) -> int:
        best = max(score[i] for i in free)
        cand = [i for i in free if score[i] >= best - tol]
        for key in keys:
            low = min(key[i] for i in cand)
            cand = [i for i in cand if key[i] <= low + tie * (1 + abs(low))]
        return cand[0]

    out, free = [0.0] * g, list(range(g))
    first = pick(r, free)
    out[first], chosen = r[first], [first]
    free.remove(first)
    while free:
        # λ never shrinks a penalty (mmr.py): r_i < 0 enters as r_i.
        score = [
            (lam * r[i] if r[i] >= 0 else r[i]) - (1 - lam) * max(0.0, max(s[i][j] for j in chosen))
            for i in range(g)
        ]
        i = pick(score, free)
        out[i] = score[i]
        chosen.append(i)
        free.remove(i)

    def same(i: int, j: int) -> bool:
        return r[i] == r[j] and all(
            abs(k[i] - k[j]) <= tie * (1 + max(abs(k[i]), abs(k[j]))) for k in keys
        )

    return [statistics.fmean(out[j] for j in range(g) if same(i, j)) for i in range(g)]


def compact(x: torch.Tensor, mask: torch.Tensor | None, b: int) -> torch.Tensor:
    return x[b] if mask is None else x[b][mask[b]]


def scatter_back(rows: list[torch.Tensor], like: torch.Tensor, mask: torch.Tensor | None):
    out = torch.zeros_like(like, dtype=rows[0].dtype)
    for b, row in enumerate(rows):
        if mask is None:
            out[b] = row
        else:
            out[b][mask[b]] = row
    return out


# --- DRA --------------------------------------------------------------------------------------


@FAST
@given(batches(), st.sampled_from([0.0, 0.3, -0.5]))
def test_dra_matches_the_formula(data, floor: float) -> None:
    r, e, mask = data
    out = dra(r, e, mask=mask, similarity_floor=floor)
    for b in range(r.shape[0]):
        rb, eb = compact(r, mask, b), compact(e, mask, b)
        sim = ref_cos(eb.double().tolist())
        # A denominator near 0 (negative floor) amplifies float32 rounding without bound.
        ones = [1.0] * len(rb)
        assume(max(abs(d) for d in ref_dra(ones, sim, floor, 1e-6)) < 1e2)
        want = ref_dra(rb.tolist(), sim, floor, 1e-6)
        torch.testing.assert_close(compact(out, mask, b), torch.tensor(want), atol=1e-4, rtol=1e-4)
    if mask is not None:
        assert (out[~mask] == 0).all()


@FAST
@given(batches())
def test_dra_batched_equals_the_per_group_loop(data) -> None:
    r, e, mask = data
    for floor in (0.0, None):
        denom_ok = True
        if floor is None:  # without a floor a denominator may vanish: skip those (tested apart)
            s = cosine_similarity(e.nan_to_num(), mask)
            denom_ok = bool((s.sum(-1) + 1e-6).abs().min() > 1e-2)
        if not denom_ok:
            continue
        batched = dra(r, e, mask=mask, similarity_floor=floor)
        loop = [
            dra(compact(r, mask, b), compact(e, mask, b), similarity_floor=floor)
            for b in range(r.shape[0])
        ]
        torch.testing.assert_close(batched, scatter_back(loop, r, mask), atol=1e-6, rtol=1e-6)


@FAST
@given(batches(max_b=1, ragged=False), st.randoms(use_true_random=False))
def test_dra_is_permutation_equivariant(data, rnd) -> None:
    r, e, _ = data
    perm = list(range(r.shape[1]))
    rnd.shuffle(perm)
    p = torch.tensor(perm)
    torch.testing.assert_close(dra(r[:, p], e[:, p]), dra(r, e)[:, p], atol=1e-5, rtol=1e-5)


@FAST
@given(st.integers(1, 6), st.integers(0, 2**31), st.data())
def test_orthogonal_embeddings_leave_dra_unchanged(g: int, seed: int, data) -> None:
    d = g + data.draw(st.integers(0, 3))
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(seed)))
    scale = torch.tensor(data.draw(st.lists(st.floats(0.1, 10), min_size=g, max_size=g)))
    e = q[:g] * scale.unsqueeze(-1)  # orthogonal rows, arbitrary positive lengths
    r = torch.tensor(data.draw(st.lists(reward, min_size=g, max_size=g)))
    for floor in (0.0, None):
        torch.testing.assert_close(dra(r, e, similarity_floor=floor), r, atol=1e-5, rtol=1e-5)


@FAST
@given(st.integers(1, 8), vector(4), st.data())
def test_identical_embeddings_divide_dra_rewards_by_g(g: int, v: list[float], data) -> None:
    scale = torch.tensor(data.draw(st.lists(st.floats(0.5, 4), min_size=g, max_size=g)))
    e = torch.tensor(v).expand(g, 4) * scale.unsqueeze(-1)  # same direction, any length
    r = torch.tensor(data.draw(st.lists(reward, min_size=g, max_size=g)))
    # A positive reward is divided by g; a penalty is kept as it is (dra.py).
    torch.testing.assert_close(dra(r, e), torch.where(r > 0, r / g, r), atol=1e-5, rtol=1e-5)


# --- MMR --------------------------------------------------------------------------------------


@FAST
@given(
    batches(),
    st.one_of(st.just("adaptive"), st.floats(0, 1)),
    st.sampled_from(["keep", "diversify"]),
)
def test_mmr_matches_the_greedy_reference(data, lam, equal_rewards: str) -> None:
    r, e, mask = data
    s = cosine_similarity(e.double().nan_to_num(), mask)
    out, lam_used = mmr(r.double(), sim=s, mask=mask, lam=lam, equal_rewards=equal_rewards)
    for b in range(r.shape[0]):
        rb = compact(r, mask, b).double()
        sb = s[b][mask[b]][:, mask[b]] if mask is not None else s[b]
        # Same similarities and λ in, so the greedy arithmetic must agree, ties included.
        want = ref_mmr(rb.tolist(), sb.tolist(), lam_used[b].item(), equal_rewards)
        assert compact(out, mask, b).tolist() == pytest.approx(want, abs=1e-12)
        if equal_rewards == "keep" and rb.max() == rb.min():
            assert lam_used[b].item() == 1.0  # the λ the group was left with


@FAST
@given(batches())
def test_mmr_batched_equals_the_per_group_loop(data) -> None:
    r, e, mask = data
    s = cosine_similarity(e.nan_to_num(), mask)
    for lam in ("adaptive", 0.3):
        batched, lam_b = mmr(r, sim=s, mask=mask, lam=lam)
        rows, lams = [], []
        for b in range(r.shape[0]):
            sb = s[b][mask[b]][:, mask[b]] if mask is not None else s[b]
            out_b, lam_1 = mmr(compact(r, mask, b), sim=sb, lam=lam)
            rows.append(out_b)
            lams.append(lam_1)
        try:
            torch.testing.assert_close(batched, scatter_back(rows, r, mask), atol=1e-6, rtol=1e-6)
        except AssertionError:
            # Allowed only where two scores sit within rounding of the tie tolerance (seen:
            # gap 1.1697e-5 against 1.1737e-5): the padded batch and the compacted group sum in
            # another order, so one may call them copies and the other not. Anything else fails.
            if not _on_the_tie_boundary(lambda lam=lam: mmr(r, sim=s, mask=mask, lam=lam)[0]):
                raise
            continue
        torch.testing.assert_close(lam_b, torch.stack(lams), atol=1e-6, rtol=1e-6)


def _on_the_tie_boundary(run) -> bool:
    """Whether `run()`'s answer changes when MMR's tie tolerance moves by 1 % either way."""
    mmr_module = importlib.import_module("reweighter.methods.mmr")

    base = mmr_module.TIE_TOL
    outs = []
    for tol in (base * 0.99, base * 1.01):
        mmr_module.TIE_TOL = tol
        try:
            outs.append(run())
        finally:
            mmr_module.TIE_TOL = base
    return not torch.equal(outs[0], outs[1])


def test_the_tie_boundary_check_tells_a_boundary_case() -> None:
    """The escape above is narrow: two equal rewards whose similarities to a third differ by a
    gap are copies to MMR below a threshold (a relative TIE_TOL) and told apart above it; only
    gaps within ~1 % of that threshold count as on the boundary, a tenth or ten times it not."""
    base = importlib.import_module("reweighter.methods.mmr").TIE_TOL

    def case(gap: float):
        r = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
        s = torch.tensor([[[1.0, 0.5, 0.2], [0.5, 1.0, 0.2 + gap], [0.2, 0.2 + gap, 1.0]]])
        return lambda: mmr(r, sim=s, lam=0.5)[0]

    assert not _on_the_tie_boundary(case(base / 10))
    assert not _on_the_tie_boundary(case(base * 10))
    on = [f for f in range(100, 301) if _on_the_tie_boundary(case(base * f / 100))]
    assert on and len(on) <= 4, on  # the threshold (between 1x and 3x TIE_TOL), and only there


@FAST
@given(st.integers(0, 2**31), st.integers(1, 5), st.integers(1, 8))
def test_mmr_from_embeddings_batched_equals_loop(seed: int, b: int, g: int) -> None:
    r, e = seeded(seed, b, g)
    batched, lam = mmr(r, e)
    for i in range(b):
        out_i, lam_i = mmr(r[i], e[i])
        torch.testing.assert_close(batched[i], out_i, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(lam[i], lam_i, atol=1e-6, rtol=1e-6)


@FAST
@given(st.integers(0, 2**31), st.integers(1, 8), st.randoms(use_true_random=False))
def test_mmr_is_permutation_equivariant_without_ties(seed: int, g: int, rnd) -> None:
    r, e = seeded(seed, 1, g)
    perm = list(range(g))
    rnd.shuffle(perm)
    p = torch.tensor(perm)
    for lam in ("adaptive", 0.6):
        out, lam_used = mmr(r, e, lam=lam)
        out_p, lam_p = mmr(r[:, p], e[:, p], lam=lam)
        torch.testing.assert_close(out_p, out[:, p], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lam_p, lam_used, atol=1e-6, rtol=1e-6)


@FAST
@given(batches(), st.one_of(st.just("adaptive"), st.floats(0, 1)))
def test_mmr_a_unique_best_reward_is_kept(data, lam) -> None:
    r, e, mask = data
    out, lam_used = mmr(r, e, mask=mask, lam=lam, equal_rewards="diversify")
    for b in range(r.shape[0]):
        rb, ob = compact(r, mask, b), compact(out, mask, b)
        first = int(rb.argmax())
        if int((rb >= rb[first] - 1e-4).sum()) == 1:  # closer counts as a tie (TIE_TOL)
            assert ob[first] == rb[first]
            # Every later pick scores λ·r_i minus a non-negative redundancy term.
            later = torch.arange(len(rb)) != first
            assert (ob[later] <= lam_used[b] * rb[later] + 1e-6).all()
    if mask is not None:
        assert (out[~mask] == 0).all()


@FAST
@given(
    st.lists(
        st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=8),
        min_size=1,
        max_size=4,
    ).filter(lambda rows: len({len(x) for x in rows}) == 1)
)
def test_adaptive_lambda_is_sigmoid_of_population_std_in_half_open_unit(rows) -> None:
    r = torch.tensor(rows)
    e = torch.randn(*r.shape, 3, generator=torch.Generator().manual_seed(0))
    _, lam = mmr(r, e, equal_rewards="diversify")
    assert ((lam >= 0.5) & (lam < 1.0)).all(), lam
    for row, lam_b in zip(rows, lam.tolist(), strict=True):
        want = 1 / (1 + math.exp(-statistics.pstdev(row)))
        assert lam_b == pytest.approx(min(want, 1 - 2**-24), rel=1e-5)


# --- advantages -------------------------------------------------------------------------------


@FAST
@given(batches(), st.sampled_from(["grpo", "dr_grpo", "none"]))
def test_advantages_match_the_formula_and_the_loop(data, kind: str) -> None:
    r, _, mask = data
    out = advantages(r, kind, mask=mask)
    for b in range(r.shape[0]):
        row = compact(r, mask, b).double().tolist()
        mean = statistics.fmean(row)
        if kind == "none":
            want = row
        elif len(row) == 1:
            want = [0.0]
        elif kind == "dr_grpo":
            want = [x - mean for x in row]
        else:
            want = [(x - mean) / (statistics.stdev(row) + 1e-4) for x in row]
        got = compact(out, mask, b)
        want_t = torch.tensor(want, dtype=torch.float64)
        torch.testing.assert_close(got.double(), want_t, atol=2e-3, rtol=1e-4)
        torch.testing.assert_close(got, advantages(compact(r, mask, b), kind), atol=1e-6, rtol=1e-6)


@FAST
@given(batches(max_b=1, ragged=False), st.sampled_from(["grpo", "dr_grpo"]), st.randoms())
def test_advantages_are_permutation_equivariant(data, kind: str, rnd) -> None:
    r, _, _ = data
    perm = list(range(r.shape[1]))
    rnd.shuffle(perm)
    p = torch.tensor(perm)
    torch.testing.assert_close(
        advantages(r[:, p], kind), advantages(r, kind)[:, p], atol=1e-3, rtol=1e-4
    )


def test_float64_in_float64_out_and_float32_by_default() -> None:
    r, e = seeded(0, 2, 4, dtype=torch.float64)
    assert dra(r, e).dtype == torch.float64
    assert mmr(r, e)[0].dtype == torch.float64
    assert dra(r.float(), e.float()).dtype == torch.float32
    assert dra([1.0, 2.0], [[1.0, 0.0], [0.0, 1.0]]).dtype == torch.float32  # lists are accepted
    assert advantages(torch.tensor([1, 0, 1]), "grpo").dtype == torch.float32  # ints promoted


def test_dra_on_similarities_equals_dra_on_embeddings() -> None:
    r, e = seeded(1, 3, 5)
    torch.testing.assert_close(dra(r, sim=cosine_similarity(e)), dra(r, e))
