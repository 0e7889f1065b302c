"""Training prompts: a shipped arithmetic set and generated word problems (`wordmath`, chat
prompts for instruction-tuned policies) for offline runs, GSM8K and MATH by name.

Every dataset comes out with the same two columns: `prompt` (plain text) and `answer` (the gold
answer as a string math-verify can parse). TRL passes `answer` to the reward functions.
"""

from __future__ import annotations

import json
import random
from importlib import resources
from typing import Any

INSTRUCTION = "Think in <think></think>, then give the final answer in <answer></answer>."
ARITH_FILE = "arith.jsonl"
ARITH_ROWS = 256
ARITH_SEED = 1234


def generate_arith(n: int = ARITH_ROWS, seed: int = ARITH_SEED) -> list[dict[str, str]]:
    """Deterministic small-integer problems (the shipped file is exactly this output)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        op = rng.choice("+-*")
        value = a + b if op == "+" else a - b if op == "-" else a * b
        rows.append({"prompt": f"What is {a} {op} {b}? {INSTRUCTION}", "answer": str(value)})
    return rows


WORD_INSTRUCTION = "Think step by step, then end with 'Answer: <number>'."
WORD_SEEDS = {"train": 2024, "test": 7}
_NAMES = ("Tom", "Ana", "Li", "Sam", "Maya", "Omar", "Zoe", "Ivan")
_ITEMS = ("apples", "marbles", "books", "coins", "stickers", "cards", "pencils", "shells")


def generate_wordmath(n: int, seed: int, two_step: bool = True) -> list[dict[str, Any]]:
    """Generated word problems with small-integer answers, as chat prompts.

    Two steps (gain then loss, or loss then gain) leave more than one valid path (a + b - c or
    a - c + b, or computing the net change first), which is what diversity is about. Answers
    are never negative. Deterministic in (n, seed); train and test use different seeds.
    """
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        a, b = rng.randint(4, 15), rng.randint(2, 9)
        c = rng.randint(1, a - 1) if two_step else 0
        if not two_step:
            text = f"{name} has {a} {item} and gets {b} more. How many {item} now?"
            value = a + b
        elif rng.random() < 0.5:
            text = (
                f"{name} has {a} {item}, buys {b} more, then gives {c} to a friend. "
                f"How many {item} does {name} have now?"
            )
            value = a + b - c
        else:
            text = (
                f"{name} has {a} {item}, loses {c}, then finds {b}. "
                f"How many {item} does {name} have now?"
            )
            value = a - c + b
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"{text} {WORD_INSTRUCTION}"}],
                "answer": str(value),
            }
        )
    return rows


_GAINS = ("gets", "buys", "finds", "is given")


def generate_wordadd(n: int, seed: int, exclude: set[str] | frozenset[str] = frozenset()
                     ) -> list[dict[str, Any]]:
    """One-step word problems ("Tom has 6 coins and gets 7 more"), both numbers 2-9.

    The `wordadd` task exists because SmolLM2-135M solves two-step `wordmath` about 1 time in
    100: a group of 8 is then almost always all wrong and GRPO has no signal. Here it starts
    at 12-16 % of samples right (128 tokens, temperature 0.7), inside the 5-40 % where a group
    usually holds both right and wrong answers. Prompts in `exclude` (the train split) are
    skipped, so held-out prompts are unseen. Deterministic in (n, seed, exclude).
    """
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    seen = set(exclude)
    while len(rows) < n:
        name, item, verb = rng.choice(_NAMES), rng.choice(_ITEMS), rng.choice(_GAINS)
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        text = (
            f"{name} has {a} {item} and {verb} {b} more. How many {item} does {name} have "
            f"now? {WORD_INSTRUCTION}"
        )
        if text in seen:
            continue
        seen.add(text)
        rows.append({"prompt": [{"role": "user", "content": text}], "answer": str(a + b)})
    return rows


def load_arith_rows() -> list[dict[str, str]]:
    text = resources.files(__name__).joinpath(ARITH_FILE).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _gsm8k(split: str):
    import datasets

    ds = datasets.load_dataset("openai/gsm8k", "main", split=split)
    return ds.map(
        lambda r: {
            "prompt": f"{r['question']} {INSTRUCTION}",
            "answer": r["answer"].split("####")[-1].strip().replace(",", ""),
        },
        remove_columns=ds.column_names,
    )


def _math(split: str):
    import datasets

    ds = datasets.load_dataset("DigitalLearningGmbH/MATH-lighteval", split=split)
    return ds.map(
        lambda r: {"prompt": f"{r['problem']} {INSTRUCTION}", "answer": r["solution"]},
        remove_columns=ds.column_names,
    )


DATASETS = {"arith", "wordmath", "wordadd", "gsm8k", "math"}
WORDADD_TRAIN_ROWS = 512  # the train split held out from `test`, whatever `limit` a run uses


def load_dataset(name: str = "arith", split: str = "train", limit: int | None = None) -> Any:
    """A `datasets.Dataset` with columns prompt, answer; GSM8K and MATH need the HF hub."""
    import datasets

    if name == "arith":
        ds = datasets.Dataset.from_list(load_arith_rows())
    elif name == "wordmath":
        if split not in WORD_SEEDS:
            raise ValueError(f"dataset.split: wordmath has splits {sorted(WORD_SEEDS)}")
        ds = datasets.Dataset.from_list(generate_wordmath(limit or 256, WORD_SEEDS[split]))
    elif name == "wordadd":
        if split not in WORD_SEEDS:
            raise ValueError(f"dataset.split: wordadd has splits {sorted(WORD_SEEDS)}")
        train = generate_wordadd(max(limit or 0, WORDADD_TRAIN_ROWS), WORD_SEEDS["train"])
        if split == "train":
            rows = train
        else:
            seen = {r["prompt"][0]["content"] for r in train}
            rows = generate_wordadd(limit or 64, WORD_SEEDS[split], exclude=seen)
        ds = datasets.Dataset.from_list(rows)
    elif name == "gsm8k":
        ds = _gsm8k(split)
    elif name == "math":
        ds = _math(split)
    else:
        raise ValueError(
            f"dataset.name: unknown dataset {name!r}; choose one of {sorted(DATASETS)}"
        )
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    return ds
