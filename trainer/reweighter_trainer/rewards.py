"""Base rewards for math: answer accuracy (math-verify) and output format.

Both follow TRL's reward-function convention, `f(prompts, completions, **columns) -> list[float]`,
and read the gold answer from the dataset's `answer` column.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

from reweighter.integrations.trl import completion_text

__all__ = [
    "accuracy_reward",
    "completion_text",
    "extract_answer",
    "extract_final_number",
    "final_answer_reward",
    "format_reward",
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


REWARDS = {
    "accuracy": accuracy_reward,
    "format": format_reward,
    "final_answer": final_answer_reward,
}
