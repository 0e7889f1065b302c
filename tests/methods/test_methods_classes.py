"""Answer classes, Darling, pass@k and outcome_ucb's bonus: hand-computed cases, the edges, and
permutation equivariance (hypothesis)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reweighter.errors import InvalidInput
from reweighter.methods import (
    CATALOG,
    advantages,
    answer_labels,
    class_counts,
    darling,
    distinct_answers,
    effective_size,
    outcome_ucb,
    pass_at_k,
    similarity_classes,
)

FAST = settings(max_examples=80, deadline=None)


def close(got: torch.Tensor, want: object, tol: float = 1e-6) -> None:
    torch.testing.assert_close(got, torch.as_tensor(want, dtype=got.dtype), atol=tol, rtol=tol)


# --- answer classes ---------------------------------------------------------------------------


def test_answer_labels_nulls_are_each_a_class_of_their_own() -> None:
    labels = answer_labels(["4", "4", None, "5", None])
    assert labels[0] == labels[1]
    assert len({labels[2], labels[4], labels[0], labels[3]}) == 4
    assert distinct_answers(["4", "4", None, "5", None]) == 2
    assert distinct_answers([None, None]) == 0


def test_similarity_classes_are_connected_components() -> None:
    # 0-1 at 0.95 and 1-2 at 0.92 join all three (transitively, although s02 = 0.5); 3 is alone.
    s = torch.tensor(
        [
            [1.0, 0.95, 0.5, 0.1],
            [0.95, 1.0, 0.92, 0.2],
            [0.5, 0.92, 1.0, 0.3],
            [0.1, 0.2, 0.3, 1.0],
        ]
    ).unsqueeze(0)
    labels = similarity_classes(s, None, 0.9)
    assert labels.tolist() == [[0, 0, 0, 3]]
    assert class_counts(labels).tolist() == [2]
    # At 0.93 the 1-2 edge is gone: {0, 1}, {2}, {3}.
    assert class_counts(similarity_classes(s, None, 0.93)).tolist() == [3]
    # A masked item is no class and joins nothing.
    mask = torch.tensor([[True, False, True, True]])
    labels = similarity_classes(s, mask, 0.9)
    assert labels[0, 1] == -1 and labels[0, 0] != labels[0, 2]
    assert class_counts(labels).tolist() == [3]


def test_effective_size_end_points_and_a_hand_case() -> None:
    assert effective_size(torch.ones(4, 4)).item() == pytest.approx(1.0)
    assert effective_size(torch.eye(5)).item() == pytest.approx(5.0)
    # n = 2, s01 = 0.5: 4 / (1 + 1 + 0.5 + 0.5) = 4/3. Negative similarity counts as 0.
    assert effective_size(torch.tensor([[1.0, 0.5], [0.5, 1.0]])).item() == pytest.approx(4 / 3)
    assert effective_size(torch.tensor([[1.0, -0.6], [-0.6, 1.0]])).item() == pytest.approx(2.0)
    # Masked: the padding item is left out (n = 2 of 3).
    s = torch.tensor([[[1.0, 0.5, 0.9], [0.5, 1.0, 0.9], [0.9, 0.9, 1.0]]])
    assert effective_size(s, torch.tensor([[True, True, False]])).tolist() == pytest.approx([4 / 3])


# --- darling ----------------------------------------------------------------------------------


def test_darling_hand_computed_from_answers() -> None:
    # answers (4, 4, 5, None), n = 4: classes {0, 1}, {2}, {3}.
    # d = ((4-2)/3, 2/3, 3/3, 3/3); r = (1, 1, 0.5, 0): r*d = (2/3, 2/3, 0.5, 0).
    labels = torch.tensor(answer_labels(["4", "4", "5", None]))
    close(darling(torch.tensor([1.0, 1.0, 0.5, 0.0]), labels), [2 / 3, 2 / 3, 0.5, 0.0])


def test_darling_gives_an_unanswered_completion_no_diversity_credit() -> None:
    # issue 40: a formatted wrong completion without an extractable answer (reward +1 from the
    # format term) beside three copies of one right answer (reward 3). Before: the None was a
    # class of its own (d = 1) and kept 1.0 while each right answer kept 3 x 1/3 = 1.0 ... and at
    # the floor (more copies) fell below it. Now d = 0 -> the floor: 0.1 x 1.0.
    given = ["4", "4", "4", None]
    labels = torch.tensor(answer_labels(given))
    r = torch.tensor([3.0, 3.0, 3.0, 1.0])
    ans = torch.tensor([a is not None for a in given])
    close(darling(r, labels), [1.0, 1.0, 1.0, 1.0])  # the old rule: a tie, right == wrong
    close(darling(r, labels, answered=ans), [1.0, 1.0, 1.0, 0.1])
    # eight: seven copies of the right answer (d = 1/7) and one unanswered completion
    labels = torch.tensor(answer_labels(["4"] * 7 + [None]))
    r = torch.tensor([3.0] * 7 + [1.0])
    ans = torch.tensor([True] * 7 + [False])
    assert darling(r, labels)[7] > darling(r, labels)[0]  # the old inversion: wrong above right
    close(darling(r, labels, answered=ans), [3.0 / 7] * 7 + [0.1])
    # the paper's floor-free formula: an unanswered completion's reward goes to 0
    close(darling(r, labels, answered=ans, diversity_floor=0.0), [3.0 / 7] * 7 + [0.0])
    # a lone right answer among failures still counts them as different from it: d = 1
    labels = torch.tensor(answer_labels(["4", None, None]))
    close(darling(torch.tensor([3.0, 1.0, 1.0]), labels,
                  answered=torch.tensor([True, False, False])), [3.0, 0.1, 0.1])
    # a penalty stays a penalty whether or not the completion answered
    close(darling(torch.tensor([-0.5, 2.0]), torch.tensor([0, 1]),
                  answered=torch.tensor([False, True])), [-0.5, 2.0])
    # every item answered: the same numbers as without `answered`
    r, labels = torch.tensor([1.0, 1.0, 0.5]), torch.tensor([0, 0, 1])
    close(darling(r, labels, answered=torch.ones(3, dtype=torch.bool)), darling(r, labels))


def test_darling_answered_is_checked_naming_the_field() -> None:
    with pytest.raises(InvalidInput, match="answered"):
        darling(torch.ones(3), torch.tensor([0, 1, 2]), answered=torch.tensor([1, 0, 1]))
    with pytest.raises(InvalidInput, match="answered"):
        darling(torch.ones(3), torch.tensor([0, 1, 2]), answered=torch.tensor([True, False]))


def test_darling_floor_as_the_authors_code_and_the_paper_without_it() -> None:
    # One class: d = 0 for every item. The code's floor 0.1 keeps the quality differences.
    r = torch.tensor([1.0, 0.5, 0.2])
    same = torch.zeros(3, dtype=torch.long)
    close(darling(r, same), [0.1, 0.05, 0.02])
    close(darling(r, same, diversity_floor=0.0), [0.0, 0.0, 0.0])
    # A group of one has no siblings: d = 1, reward unchanged.
    close(darling(torch.tensor([0.7]), torch.tensor([0])), [0.7])


def test_darling_keeps_a_penalty_as_it_is() -> None:
    # rewards (1, 1, -1, -1), classes {0, 1}, {2, 3}: d = (4-2)/3 = 2/3 each. Quality is scaled,
    # a penalty is kept: multiplying -1 by d (or by the floor, for a group-wide wrong answer)
    # would cut the penalty of a collapsed wrong answer and push toward it.
    r = torch.tensor([1.0, 1.0, -1.0, -1.0])
    close(darling(r, torch.tensor([0, 0, 1, 1])), [2 / 3, 2 / 3, -1.0, -1.0])
    # four copies of one wrong answer beside nothing else: every penalty stays -0.5, not -0.05
    close(darling(torch.tensor([-0.5] * 4), torch.zeros(4, dtype=torch.long)), [-0.5] * 4)
    # a unique wrong answer and a collapsed one are penalised alike (no reward for collapse)
    out = darling(torch.tensor([1.0, -1.0, -1.0, -1.0]), torch.tensor([0, 1, 1, 2]))
    close(out, [1.0, -1.0, -1.0, -1.0])


def test_darling_on_similarities_hand_computed() -> None:
    # s01 = 0.95 >= 0.9: {0, 1}, {2}. d = (1/2, 1/2, 1).
    s = torch.tensor([[1.0, 0.95, 0.2], [0.95, 1.0, 0.3], [0.2, 0.3, 1.0]])
    close(darling(torch.ones(3), sim=s, class_threshold=0.9), [0.5, 0.5, 1.0])
    # Threshold 0.96: three classes, every d = 1.
    close(darling(torch.ones(3), sim=s, class_threshold=0.96), [1.0, 1.0, 1.0])


def test_darling_masked_items_are_out_of_every_count() -> None:
    r = torch.tensor([[1.0, 1.0, 9.0, 1.0]])
    labels = torch.tensor([[0, 0, 0, 1]])
    mask = torch.tensor([[True, True, False, True]])
    # n = 3: classes {0, 1}, {3}: d = (1/2, 1/2, -, 1).
    close(darling(r, labels, mask=mask), [[0.5, 0.5, 0.0, 1.0]])


def test_darling_rejects_bad_input_naming_the_argument() -> None:
    with pytest.raises(InvalidInput) as e:
        darling(torch.ones(3), torch.tensor([0.0, 1.0, 2.0]))
    assert e.value.field == "classes"
    with pytest.raises(InvalidInput) as e:
        darling(torch.ones(3), torch.tensor([0, 1]))
    assert e.value.field == "classes"
    with pytest.raises(InvalidInput) as e:
        darling(torch.ones(2), torch.tensor([0, 1]), diversity_floor=2.0)
    assert e.value.field == "diversity_floor"


# --- pass@k -----------------------------------------------------------------------------------


def test_pass_at_k_hand_computed() -> None:
    # n = 4, c = 1, k = 2: rho = 1 - C(3,2)/C(4,2) = 1/2, sigma = 1/2.
    # success (1 - 1/2)/(1/2) = 1; failure (1/2 - C(2,1)/C(3,1))/(1/2) = (1/2 - 2/3)*2 = -1/3.
    close(pass_at_k(torch.tensor([0.0, 1.0, 0.0, 0.0]), 2), [-1 / 3, 1.0, -1 / 3, -1 / 3])
    # n = 4, c = 2, k = 2: rho = 1 - 1/6 = 5/6, sigma = sqrt(5)/6; success (1/6)/sigma = 1/sqrt5;
    # failure (1/6 - C(1,1)/C(3,1))/sigma = (-1/6)/sigma = -1/sqrt5.
    s5 = 1 / math.sqrt(5)
    close(pass_at_k(torch.tensor([1.0, 1.0, 0.0, 0.0]), 2), [s5, s5, -s5, -s5])


def test_pass_at_k_saturated_and_equal_groups_get_zero() -> None:
    # n - c = 1 < k = 2: every pair holds a success, rho = 1: nothing to improve.
    close(pass_at_k(torch.tensor([1.0, 1.0, 1.0, 0.0]), 2), [0.0] * 4)
    close(pass_at_k(torch.zeros(5), 3), [0.0] * 5)
    close(pass_at_k(torch.ones(5), 3), [0.0] * 5)
    close(pass_at_k(torch.tensor([1.0]), 1), [0.0])


def test_pass_at_k_success_threshold() -> None:
    # Successes at >= 1.0: items 1 and 3 (c = 2 of 4, k = 2): the second hand case again.
    s5 = 1 / math.sqrt(5)
    out = pass_at_k(torch.tensor([0.9, 1.2, 0.2, 1.0]), 2, success_threshold=1.0)
    close(out, [-s5, s5, -s5, s5])
    out = pass_at_k(torch.tensor([0.9, 1.2, 0.2, 1.0]), 1, success_threshold=0.5)
    p = 0.75  # c = 3 of 4
    sd = math.sqrt(p * (1 - p))
    close(out, [(1 - p) / sd, (1 - p) / sd, -p / sd, (1 - p) / sd], tol=1e-5)


@FAST
@given(st.lists(st.lists(st.integers(0, 1), min_size=2, max_size=9), min_size=1, max_size=5))
def test_pass_at_1_is_grpo_with_the_population_std(groups: list[list[int]]) -> None:
    g = max(len(x) for x in groups)
    r = torch.zeros(len(groups), g, dtype=torch.float64)
    mask = torch.zeros(len(groups), g, dtype=torch.bool)
    for i, x in enumerate(groups):
        r[i, : len(x)] = torch.tensor(x, dtype=torch.float64)
        mask[i, : len(x)] = True
    got = pass_at_k(r, 1, mask=mask)
    for i, x in enumerate(groups):
        v = torch.tensor(x, dtype=torch.float64)
        std = v.std(unbiased=False)
        want = torch.zeros_like(v) if std == 0 else (v - v.mean()) / std
        close(got[i, : len(x)], want.tolist(), tol=1e-9)
        assert got[i, len(x) :].abs().sum() == 0


def test_pass_at_k_refuses_k_beyond_the_group_and_k_below_one() -> None:
    with pytest.raises(InvalidInput) as e:
        pass_at_k(torch.ones(3), 4)
    assert e.value.field == "k"
    with pytest.raises(InvalidInput) as e:
        pass_at_k(torch.ones(3), 0)
    assert e.value.field == "k"
    with pytest.raises(InvalidInput) as e:
        advantages(torch.ones(3), "pass_at_k", k=5)
    assert e.value.field == "k"


# --- outcome_ucb ------------------------------------------------------------------------------


def test_outcome_ucb_bonus_hand_computed() -> None:
    # Earlier counts (0, 4, no answer, 16), c = 0.5: b = min(1, 1/sqrt(N)) = 1, 1/2, -, 1/4.
    r = torch.tensor([1.0, 1.0, 0.0, 0.0])
    n = torch.tensor([0, 4, -1, 16])
    close(outcome_ucb(r, n, scale=0.5, baseline=None), [1.5, 1.25, 0.0, 0.125])  # naive UCB
    close(outcome_ucb(r, n, scale=0.5, baseline=0.5), [1.25, 1.0, 0.0, -0.125])  # UCB-Con
    # UCB-Mean: the answered items' mean b = 7/12; the terms sum to 0.
    close(outcome_ucb(r, n, scale=0.5, baseline="mean"), [1 + 5 / 24, 1 - 1 / 24, 0.0, -1 / 6])
    close(outcome_ucb(r, n, scale=0.5, apply_to="correct"), [1.25, 1.0, 0.0, 0.0])
    close(outcome_ucb(r, n, scale=0.0), [1.0, 1.0, 0.0, 0.0])
    # The defaults are the paper's UCB-Con run: c = 0.2, b0 = 0.5.
    close(outcome_ucb(r, n), [1.1, 1.0, 0.0, -0.05])
    # N = 0 and N = 1 both give the whole bonus (the min of min(1, 1/sqrt(N))).
    close(outcome_ucb(torch.zeros(2), torch.tensor([0, 1]), baseline=None), [0.2, 0.2])
    for bad, field in (
        ({"scale": -1.0}, "scale"),
        ({"baseline": "max"}, "baseline"),
        ({"baseline": float("nan")}, "baseline"),
        ({"apply_to": "x"}, "apply_to"),
    ):
        with pytest.raises(InvalidInput) as e:
            outcome_ucb(r, n, **bad)  # type: ignore[arg-type]
        assert e.value.field == field


# --- permutation equivariance -----------------------------------------------------------------


@st.composite
def group(draw: st.DrawFn) -> tuple[list[float], list[int], list[int], list[int]]:
    g = draw(st.integers(1, 10))
    rewards = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=g, max_size=g))
    labels = draw(st.lists(st.integers(0, 3), min_size=g, max_size=g))
    counts = draw(st.lists(st.integers(-1, 20), min_size=g, max_size=g))
    perm = draw(st.permutations(list(range(g))))
    return rewards, labels, counts, perm


@FAST
@given(group(), st.integers(1, 10))
def test_new_methods_are_permutation_equivariant(
    case: tuple[list[float], list[int], list[int], list[int]], k: int
) -> None:
    rewards, labels, counts, perm = case
    r, lab, cnt = torch.tensor(rewards), torch.tensor(labels), torch.tensor(counts)
    p = torch.tensor(perm)
    close(darling(r[p], lab[p]), darling(r, lab)[p].tolist())
    ans = lab != 3  # label 3 stands for "no answer": the flag moves with its item
    close(darling(r[p], lab[p], answered=ans[p]), darling(r, lab, answered=ans)[p].tolist())
    for baseline in (None, 0.5, "mean"):
        close(
            outcome_ucb(r[p], cnt[p], baseline=baseline),
            outcome_ucb(r, cnt, baseline=baseline)[p].tolist(),
        )
    k = min(k, len(rewards))
    close(pass_at_k(r[p], k), pass_at_k(r, k)[p].tolist(), tol=1e-5)
    # Classes from similarities: a permuted similarity matrix gives the permuted partition.
    e = torch.nn.functional.one_hot(lab, 4).float() + 0.01 * torch.arange(len(rewards)).unsqueeze(
        -1
    )
    s = torch.nn.functional.normalize(e, dim=-1) @ torch.nn.functional.normalize(e, dim=-1).T
    close(
        darling(r[p], sim=s[p][:, p], class_threshold=0.9),
        darling(r, sim=s, class_threshold=0.9)[p].tolist(),
    )
    close(effective_size(s[p][:, p]), effective_size(s).item(), tol=1e-5)


def test_catalogue_lists_the_new_methods_with_their_needs() -> None:
    assert CATALOG["darling"].needs == ("classes",)
    assert CATALOG["outcome_ucb"].needs == ("memory",)
    assert "class_threshold" in CATALOG["darling"].params_model.model_fields


def _union_find(s: torch.Tensor, threshold: float) -> list[int]:
    """Components by a plain union-find (Darling's own algorithm), the smallest index each."""
    parent = list(range(s.shape[0]))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for i in range(s.shape[0]):
        for j in range(s.shape[0]):
            if s[i, j] >= threshold:
                a, b = find(i), find(j)
                parent[max(a, b)] = min(a, b)
    return [find(i) for i in range(s.shape[0])]


@FAST
@given(st.integers(1, 12), st.integers(0, 2**31 - 1), st.sampled_from([0.0, 0.3, 0.6, 0.9]))
def test_similarity_classes_match_a_union_find(g: int, seed: int, threshold: float) -> None:
    e = torch.randn(g, 4, generator=torch.Generator().manual_seed(seed))
    e = torch.nn.functional.normalize(e, dim=-1)
    s = e @ e.T
    assert similarity_classes(s.unsqueeze(0), None, threshold)[0].tolist() == _union_find(
        s, threshold
    )
