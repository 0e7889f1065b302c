"""The OpenRLHF route's member answers: the checker's final answer in its compared form, so
answers equal to the checker are one class for darling and distinct_answers."""

from __future__ import annotations

import pytest

from reweighter.verify.math_answers import answers_match, canonical_answer


@pytest.mark.parametrize(
    ("response", "want"),
    [
        ("so the result is \\boxed{1/2}", "1/2"),
        ("Answer: 0.50", "1/2"),
        ("#### 42", "42"),
        ("I add 40 and 2 to get 42", "42"),
        ("so \\boxed{\\dfrac{1}{2}}", "1/2"),  # a LaTeX fraction is the same number
        ("Answer: x = y", "x=y"),
        ("no number at all", None),
    ],
)
def test_canonical_answer(response: str, want: str | None) -> None:
    assert canonical_answer(response) == want


def test_equal_canonical_answers_are_answers_the_checker_matches() -> None:
    a, b = canonical_answer("Answer: 0.5"), canonical_answer("the answer is 1/2")
    assert a == b and answers_match("0.5", "1/2")
