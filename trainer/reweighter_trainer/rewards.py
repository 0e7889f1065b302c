"""Base rewards for math: answer accuracy (math-verify) and output format.

Both follow TRL's reward-function convention, `f(prompts, completions, **columns) -> list[float]`,
and read the gold answer from the dataset's `answer` column.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from typing import Any

from reweighter.integrations.trl import completion_text

__all__ = [
    "COSINE",
    "TASK_MAX_LEN",
    "accuracy_reward",
    "answer_format_reward",
    "completion_text",
    "correct_reward",
    "cosine_scaled_correct_reward",
    "extract_answer",
    "extract_final_number",
    "correct_answer",
    "extract_answers",
    "extract_pick",
    "extract_picks",
    "given_answer",
    "final_answer_reward",
    "format_reward",
    "is_correct",
]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FINAL = re.compile(
    r"answer(?:\s+is)?\s*[:*]*\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)", re.IGNORECASE
)
_FULL_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def extract_answer(text: str) -> str | None:
    """The last <answer>…</answer> span: the model's final answer, when it gave one."""
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


def accuracy_reward(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str], **_: Any
) -> list[float]:
    """1.0 when the answer tag's content is mathematically equal to the gold answer, else 0.0.

    Only the tagged answer counts, so a model cannot score by mentioning many numbers.
    """
    from math_verify import parse, verify

    # math-verify's timeouts use SIGALRM, which only works on the main thread; TRL may call reward
    # functions from another one, where the timeout has to be off.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    out = []
    for completion, gold in zip(completions, answer, strict=True):
        given = extract_answer(completion_text(completion))
        if not given:
            out.append(0.0)
            continue
        gold_parsed = parse(gold, parsing_timeout=timeout)
        given_parsed = parse(given, parsing_timeout=timeout)
        ok = bool(gold_parsed and given_parsed) and verify(
            gold_parsed, given_parsed, timeout_seconds=timeout
        )
        out.append(1.0 if ok else 0.0)
    return out


def format_reward(prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
    """1.0 for `<think>…</think><answer>…</answer>` alone; 0.5 for just an answer tag."""
    out = []
    for completion in completions:
        text = completion_text(completion)
        if _FULL_FORMAT.match(text):
            out.append(1.0)
        elif _ANSWER.search(text):
            out.append(0.5)
        else:
            out.append(0.0)
    return out


def extract_final_number(text: str) -> str | None:
    """The number after the last "Answer:" ("answer is", "**Answer:** $") with commas removed.

    Small chat models write answers many ways; the word "answer" anchors the number so that
    intermediate results in the reasoning never count.
    """
    found = _FINAL.findall(text)
    return found[-1].replace(",", "") if found else None


def final_answer_reward(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str], **_: Any
) -> list[float]:
    """1.0 when the number after the last "Answer:" equals the gold number, else 0.0.

    For the `wordmath` task (integer answers); exact numeric comparison, no math parser needed.
    """
    out = []
    for completion, gold in zip(completions, answer, strict=True):
        given = extract_final_number(completion_text(completion))
        try:
            ok = given is not None and float(given) == float(gold)
        except ValueError:
            ok = False
        out.append(1.0 if ok else 0.0)
    return out


def _checks(check: Sequence[str] | None, n: int) -> Sequence[str | None]:
    return check if check is not None else [None] * n


_ANSWER_LINE = re.compile(r"answer\s*[:*]+", re.IGNORECASE)
_ANSWER_LINE_END = re.compile(r"answer\s*[:*]+[^\n]*\S[^\n]*\s*$", re.IGNORECASE)


def extract_picks(text: str, domain: str) -> frozenset[str] | None:
    """The items of `domain` (data.DOMAINS: month, day, number) named on the last "Answer:"
    line, canonical ("5" for "five"); None when there is no such line."""
    from .data import DOMAINS

    found = list(_ANSWER_LINE.finditer(text))
    if not found:
        return None
    line = text[found[-1].end() :].split("\n", 1)[0].lower()
    return frozenset(
        canon for surface, canon in DOMAINS[domain].items()
        if re.search(rf"(?<![a-z0-9]){re.escape(surface)}(?![a-z0-9])", line)
    )


def extract_pick(text: str, domain: str) -> str | None:
    """The one item of `domain` named on the last "Answer:" line, canonical; None when it
    names none or several."""
    named = extract_picks(text, domain)
    return next(iter(named)) if named is not None and len(named) == 1 else None


PICK_CHECKS = {"pick_one": 1, "pick_two": 2}
"""A pick task's check -> how many different items a correct answer names."""


def given_answer(text: str, gold: str, check: str | None = None) -> str | None:
    """The canonical answer a completion gives, right or wrong; None when it gives none.

    pick tasks: the items named on the last "Answer:" line, sorted and joined by "+" ("april+june";
    the order a pair is named in does not make another answer); otherwise the number after the
    last "Answer:". This is what the service's `answers` field wants: completions with equal
    strings are the same answer.
    """
    if check in PICK_CHECKS:
        from .data import PICK_CATEGORIES, PICK_TWO_CATEGORIES

        domain = (PICK_CATEGORIES if check == "pick_one" else PICK_TWO_CATEGORIES)[gold][0]
        named = extract_picks(text, domain)
        return "+".join(sorted(named)) if named else None
    return extract_final_number(text)


def correct_answer(text: str, gold: str, check: str | None = None) -> str | None:
    """The canonical correct answer a completion gives (`given_answer`), None when it is wrong.
    `check` "pick_one" / "pick_two" (`gold` is the category key): the last "Answer:" line names
    exactly one / two different items of the domain, all in the category's set; by default the
    number after the last "Answer:" must equal `gold`."""
    if check in PICK_CHECKS:
        from .data import PICK_CATEGORIES, PICK_TWO_CATEGORIES

        domain, good, _, _ = (PICK_CATEGORIES if check == "pick_one" else PICK_TWO_CATEGORIES)[gold]
        named = extract_picks(text, domain)
        ok = named is not None and len(named) == PICK_CHECKS[check] and named <= good
        return "+".join(sorted(named)) if ok else None
    given = extract_final_number(text)
    try:
        return given if given is not None and float(given) == float(gold) else None
    except ValueError:
        return None


def extract_answers(completions: Sequence[Any], answer: Sequence[str],
                    check: Sequence[str] | None = None) -> list[str | None]:
    """`given_answer` of every completion (TRL's completion forms): the `answers` a trainer
    sends with a group, so answer-aware methods (pass@k, Darling) see what the checker saw."""
    return [given_answer(completion_text(c), gold, chk)
            for c, gold, chk in zip(completions, answer, _checks(check, len(completions)),
                                    strict=True)]


def is_correct(text: str, gold: str, check: str | None = None) -> bool:
    return correct_answer(text, gold, check) is not None


def answer_format_reward(prompts: Sequence[Any], completions: Sequence[Any], **_: Any
                         ) -> list[float]:
    """1.0 when the completion ends with an "Answer: ..." line, as the prompt asks, else 0.0.

    The tasks' counterpart of the papers' format reward (1.0 for exactly one "\\n</think>\\n",
    the tag their system prompt asks for): it rewards the form asked for, not the content.
    """
    return [1.0 if _ANSWER_LINE_END.search(completion_text(c)) else 0.0 for c in completions]


COSINE = {
    "min_value_wrong": 0.0,
    "max_value_wrong": -0.5,
    "min_value_correct": 0.5,
    "max_value_correct": 1.0,
    "max_len": 1000,
}
"""The constants both papers trained with (DRA-GRPO and MMR-GRPO: open-r1's GRPOScriptArguments
defaults, which their recipes do not override; the function's own defaults, -1.0 for
min_value_wrong, are never used). Lengths are in characters."""

TASK_MAX_LEN = {"pick_two": 200}
"""The cosine term's max_len per task check, where the papers' 1000 characters would leave it
inert. `picktwo` generates at most 48 tokens, about 200 characters (the picktwo gate: median 34,
p90 172, max 273 characters), so 200 puts the budget where the papers' sits against their 1000:
a correct one-line answer (~25 characters) earns ~0.99,
a correct answer after 100 characters of preamble 0.75. pickone keeps 1000 (its runs used it)."""


def cosine_scaled_correct_reward(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str],
    check: Sequence[str] | None = None, **_: Any,
) -> list[float]:
    """open-r1's `get_cosine_scaled_reward` with the papers' constants (COSINE), our checker.

        reward = lo + (hi - lo) * (1 + cos(pi * len / max_len)) / 2

    correct: lo = min_value_correct 0.5, hi = max_value_correct 1.0 (shorter is better);
    wrong: lo = max_value_wrong -0.5, hi = min_value_wrong 0.0 (open-r1 swaps them), so a wrong
    answer costs 0 when empty and -0.5 at max_len. `len` is the completion's length in
    characters, unclamped (past max_len the cosine turns back up, as in open-r1); max_len is
    TASK_MAX_LEN's for the row's check where it has one, else the papers' 1000.
    """
    c = COSINE
    out = []
    for comp, gold, chk in zip(completions, answer, _checks(check, len(completions)),
                               strict=True):
        text = completion_text(comp)
        if is_correct(text, gold, chk):
            lo, hi = c["min_value_correct"], c["max_value_correct"]
        else:
            lo, hi = c["max_value_wrong"], c["min_value_wrong"]
        max_len = TASK_MAX_LEN.get(chk or "", c["max_len"])
        cosine = math.cos(math.pi * len(text) / max_len)
        out.append(float(lo + 0.5 * (hi - lo) * (1.0 + cosine)))
    return out


def correct_reward(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str],
    check: Sequence[str] | None = None, **_: Any,
) -> list[float]:
    """1.0 when the task's checker accepts the answer (`is_correct`), else 0.0: the 0/1 reward
    for any task, digitpairs included."""
    return [
        1.0 if is_correct(completion_text(comp), gold, chk) else 0.0
        for comp, gold, chk in zip(completions, answer, _checks(check, len(completions)),
                                   strict=True)
    ]


REWARDS = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "final_answer": final_answer_reward,
    "correct": correct_reward,
    "answer_format": answer_format_reward,
    "cosine": cosine_scaled_correct_reward,
}
PAPER_REWARD = {"answer_format": 1.0, "cosine": 2.0}
"""Both papers' recipes: reward_funcs [format, cosine], reward_weights [1.0, 2.0]."""
