"""Training prompts: a shipped arithmetic set for offline runs, GSM8K and MATH by name.

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


DATASETS = {"arith", "gsm8k", "math"}


def load_dataset(name: str = "arith", split: str = "train", limit: int | None = None) -> Any:
    """A `datasets.Dataset` with columns prompt, answer; GSM8K and MATH need the HF hub."""
    import datasets

    if name == "arith":
        ds = datasets.Dataset.from_list(load_arith_rows())
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
