"""A lenient math answer checker: the final answer of a free-form response against a label.

Why not the trainer's `accuracy_reward` (trainer/reweighter_trainer/rewards.py): that one
reads only the `<answer>` tag the trainer's own prompt asks for (so a model cannot score by
mentioning many numbers) and needs `math-verify`. Here the responses come from any OpenRLHF
dataset and prompt format, and the service must not depend on a math parser, so the final
answer is found the ways math datasets write it (\\boxed{}, "####", "answer is", last number)
and compared by value. Different rules, different names: `final_answer` here,
`extract_answer` (the tag) there.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from . import Verifier, response_of

# A LaTeX fraction is one answer, not the numbers inside it: the alternation tries it first at
# each position, so "\\dfrac{1}{2}" is one token (it once read as "1").
_NUMBER = re.compile(r"-?\\[dt]?frac\{-?\d+\}\{\d+\}|-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def _boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def final_answer(response: str) -> str | None:
    """The last \\boxed{...}, else the text after the last "####"/"answer is"/"Answer:", else
    the last number in the response."""
    boxed = _boxed(response)
    if boxed is not None:
        return boxed
    for marker in ("####", "answer is", "Answer:"):
        k = response.rfind(marker)
        if k >= 0:
            tail = response[k + len(marker) :].strip()
            numbers = _NUMBER.findall(tail)
            return numbers[0] if numbers else tail.split("\n")[0]
    numbers = _NUMBER.findall(response)
    return numbers[-1] if numbers else None


def canonical_answer(response: str) -> str | None:
    """The response's final answer in the form answers are compared in (numbers as the
    shortest exact fraction, "0.50" and "1/2" alike): a group's answer classes (darling,
    outcome_ucb, stats.distinct_answers). None when it gives none."""
    given = final_answer(response)
    if not given:
        return None
    a = _normalise(given)
    number = _as_number(a)
    return str(number) if number is not None else a[:4096] or None


def _normalise(answer: str) -> str:
    a = answer.strip().strip("$").strip().rstrip(".").replace("\\!", "").replace(" ", "")
    return a.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def _as_number(answer: str) -> Fraction | None:
    a = _normalise(answer).replace(",", "")
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(\d+)\}", a)
    if m:
        a = f"{m.group(1)}{m.group(2)}/{m.group(3)}".replace("--", "")
    try:
        return Fraction(a)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(given: str | None, gold: Any) -> bool:
    """Numbers (integers, decimals, fractions, \\frac{a}{b}) compare by value; anything else
    compares as normalised text."""
    if given is None or gold is None:
        return False
    gold_s = str(gold)
    a, b = _as_number(given), _as_number(gold_s)
    if a is not None and b is not None:
        return a == b
    return _normalise(given) == _normalise(gold_s)


def label_answer(label: Any) -> Any:
    """The answer a label states: a worked solution (GSM8K's `answer` column, ending in
    "#### 72", or one with a \\boxed{}) gives its final answer; any other label is the
    answer itself (so a symbolic "x + 1" is not cut down to its last number)."""
    if isinstance(label, str) and ("####" in label or "\\boxed{" in label):
        return final_answer(label)
    return label


def math_verifier() -> Verifier:
    """1.0 when the response's final answer equals the label's, else 0.0."""

    async def verify(queries: list[str], prompts: list[str], labels: list[Any]) -> list[float]:
        return [
            1.0 if answers_match(final_answer(response_of(q, p)), label_answer(gold)) else 0.0
            for q, p, gold in zip(queries, prompts, labels, strict=True)
        ]

    return verify
