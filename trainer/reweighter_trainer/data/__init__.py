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


_MONTHS = [
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
]
_DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUMBER_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
]
DOMAINS: dict[str, dict[str, str]] = {
    "month": {m: m for m in _MONTHS},
    "day": {d: d for d in _DAYS},
    "number": {**{str(i): str(i) for i in range(21)}, **{w: str(i) for i, w in
                                                         enumerate(_NUMBER_WORDS)}},
}
"""Every item a domain can name, surface form -> canonical answer (numbers as digits)."""

PICK_CATEGORIES: dict[str, tuple[str, frozenset[str], tuple[str, ...], tuple[str, ...]]] = {
    # key: (domain, correct answers, train wordings, held-out wordings)
    "month_30_days": ("month", frozenset({"april", "june", "september", "november"}),
                      ("Name a month that has 30 days.", "Which month has exactly 30 days?"),
                      ("Give one month of the year with 30 days.",)),
    "month_j": ("month", frozenset({"january", "june", "july"}),
                ("Name a month whose name starts with J.", "Which month begins with the letter J?"),
                ("Give one month starting with a J.",)),
    "month_summer": ("month", frozenset({"june", "july", "august"}),
                     ("Name a summer month in Europe.", "Which month is in summer in Europe?"),
                     ("Give one month of the European summer.",)),
    "month_winter": ("month", frozenset({"december", "january", "february"}),
                     ("Name a winter month in Europe.", "Which month is in winter in Europe?"),
                     ("Give one month of the European winter.",)),
    "prime_below_10": ("number", frozenset({"2", "3", "5", "7"}),
                       ("Name a prime number smaller than 10.", "Which number below 10 is prime?"),
                       ("Give one prime number less than ten.",)),
    "even_1_to_9": ("number", frozenset({"2", "4", "6", "8"}),
                    ("Name an even number between 1 and 9.", "Which number from 1 to 9 is even?"),
                    ("Give one even number from 1 to 9.",)),
}
"""The `pickone` task: name one member of a small set. Every prompt has 3-4 correct answers,
each a single word, so the distinct correct answers per prompt are counted exactly."""

PICK_SHOT = [
    {"role": "user", "content": "Name a colour of the flag of France."},
    {"role": "assistant", "content": "Answer: blue"},
]
"""One example exchange before every prompt (another domain: it shows the form, not an answer).
Without it SmolLM2-135M rarely ends with 'Answer: ...' (EXPERIMENTS.md, task probes)."""


def _pick_rows(categories: dict, shot: list[dict[str, str]], check: str, n: int,
               split: str) -> list[dict[str, Any]]:
    """Rows of a pick task: category x wording x name, in a fixed shuffled order, cycled to n.

    Train and test use different wordings (held-out prompts are unseen; the categories recur).
    `answer` is the category key; `check` tells the rewards how to judge.
    """
    if split not in WORD_SEEDS:
        raise ValueError(f"dataset.split: {check} has splits {sorted(WORD_SEEDS)}")
    combos = []
    for key, (_, _, train, test) in categories.items():
        for wording in train if split == "train" else test:
            combos += [(key, f"{name} asks: {wording}") for name in _NAMES] + [(key, wording)]
    random.Random(WORD_SEEDS[split]).shuffle(combos)
    return [
        {"prompt": [*shot, {"role": "user", "content": text}], "answer": key, "check": check}
        for key, text in (combos[i % len(combos)] for i in range(n))
    ]


def generate_pickone(n: int, split: str) -> list[dict[str, Any]]:
    """`pickone` rows (check "pick_one"): name one member of a category."""
    return _pick_rows(PICK_CATEGORIES, PICK_SHOT, "pick_one", n, split)


_MONTHS_31 = frozenset({"january", "march", "may", "july", "august", "october", "december"})
PICK_TWO_CATEGORIES: dict[str, tuple[str, frozenset[str], tuple[str, ...], tuple[str, ...]]] = {
    # key: (domain, correct items, train wordings, held-out wordings); a correct answer names
    # two different items of the set, in any order: C(|set|, 2) correct answers per prompt.
    "month_31_days": ("month", _MONTHS_31,
                      ("Name two different months that have 31 days.",
                       "Which two months each have 31 days?"),
                      ("Give two months of the year with 31 days each.",)),
    "month_summer": ("month", PICK_CATEGORIES["month_summer"][1],
                     ("Name two different summer months in Europe.",
                      "Which two months are in summer in Europe?"),
                     ("Give two months of the European summer.",)),
    "weekday": ("day", frozenset({"monday", "tuesday", "wednesday", "thursday", "friday"}),
                ("Name two different working days of the week.",
                 "Which two days of the week are working days?"),
                ("Give two weekdays that are not on the weekend.",)),
    "prime_below_10": ("number", PICK_CATEGORIES["prime_below_10"][1],
                       ("Name two different prime numbers smaller than 10.",
                        "Which two numbers below 10 are prime?"),
                       ("Give two prime numbers less than ten.",)),
    "odd_below_10": ("number", frozenset({"1", "3", "5", "7", "9"}),
                     ("Name two different odd numbers smaller than 10.",
                      "Which two numbers below 10 are odd?"),
                     ("Give two odd numbers less than ten.",)),
    # Amendment (issue 31, before any pilot data): the four categories the first gate scored 0
    # (month_30_days, month_j, month_winter, even_1_to_9: PICK_TWO_DROPPED) replaced by three
    # easier ones, so that the untrained policy's groups are not mostly all wrong.
    "month_any": ("month", frozenset(_MONTHS),
                  ("Name two different months of the year.",
                   "Which two months of the year can you name?"),
                  ("Give two months of the year.",)),
    "day_any": ("day", frozenset(_DAYS),
                ("Name two different days of the week.",
                 "Which two days of the week can you name?"),
                ("Give two days of the week.",)),
    "number_below_10": ("number", frozenset(str(i) for i in range(10)),
                        ("Name two different numbers smaller than 10.",
                         "Which two whole numbers are smaller than 10?"),
                        ("Give two whole numbers less than ten.",)),
}
"""The `picktwo` task: name two different members of a set of 3-12 (3-66 correct unordered
answers per prompt), judged exactly (rewards.correct_answer, check "pick_two"). Harder for the
untrained policy than `pickone` (it must name two, both right, not the same one twice). As
amended after the first gate failed (EXPERIMENTS.md): 8 categories, 144 train prompts."""

PICK_TWO_DROPPED = ("month_30_days", "month_j", "month_winter", "even_1_to_9")
"""The first picktwo's categories that its gate scored 0 (experiments/picktwo-gate, first run,
in git history) and the amendment removed."""

PICK_TWO_SHOT = [
    {"role": "user", "content": "Name two different colours of the flag of France."},
    {"role": "assistant", "content": "Answer: blue and white"},
]
"""The form, shown once on another domain (as PICK_SHOT for pickone)."""


def generate_picktwo(n: int, split: str) -> list[dict[str, Any]]:
    """`picktwo` rows (check "pick_two"): name two different members of a category."""
    return _pick_rows(PICK_TWO_CATEGORIES, PICK_TWO_SHOT, "pick_two", n, split)


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


DATASETS = {"arith", "wordmath", "wordadd", "pickone", "picktwo", "gsm8k", "math"}
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
    elif name == "pickone":
        ds = datasets.Dataset.from_list(generate_pickone(limit or 256, split))
    elif name == "picktwo":
        ds = datasets.Dataset.from_list(generate_picktwo(limit or 256, split))
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
