"""Right completions ranked below wrong ones, on the committed groups: whole reward vs quality.

picktwo-main's DRA, MMR and Darling arms logged every group (completions, base rewards, the
rewards the method returned, the checker's verdict per completion in `answers`). The base reward
is the papers' (research/configs/smollm2-picktwo.yaml): `answer_format` (1.0 for an "Answer:"
line) + 2 x `cosine` (correctness, length-shaped: right in [1, 2], wrong in [-1, 0]). A group is
*mixed* when the checker accepted some completions and rejected others; it has an *inversion*
when its lowest right completion's reweighted reward is below its highest wrong one's.

Four columns per method, each recomputed here:

- `logged`: the rewards the run returned (the method as it ran then: DRA and MMR then divided
  or λ-scaled penalties too, Darling gave an unanswered completion d = 1);
- `whole`: the method as shipped now on the whole reward (no `quality`): the papers' default,
  with penalties kept (DRA, Darling) or not shrunk by λ (MMR), Darling's d = 0 for no answer;
- `scaled`: the method on `quality` = the correctness term, 2 x cosine recomputed from the
  completion (= base reward - answer_format, checked against the log to 1e-9), the format term
  added back unscaled, and nothing more;
- `quality`: what the service does with that quality (`MethodSpec.run`): `scaled`, then
  `right_above_wrong` (docs/methods.md, "Quality apart from the rest").

DRA and MMR need the completions' similarities: they are embedded again with the service's
encoder (the bundled all-MiniLM-L6-v2, as the run's service); the replay checks it is the run by
reproducing the logged rewards where the shipped rule and the run's agree (DRA at every positive
reward; MMR in groups without a negative reward), to TOL (the run embedded on a GPU: the
largest difference seen is 2.8e-4).

    python -m reweighter_research.inversions [RUNS]   # prints the table (read-only)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from reweighter.methods import answer_labels, get_method
from reweighter.methods.context import MethodContext
from reweighter_research.decision import group_logs, read_groups
from reweighter_trainer.rewards import (
    answer_format_reward,
    cosine_scaled_correct_reward,
    given_answer,
)

RUNS = Path(__file__).resolve().parents[2] / "experiments" / "picktwo-main" / "runs"
ARMS = {"dra": {}, "mmr": {"lambda": "adaptive", "equal_rewards": "diversify"}, "darling": {}}
"""Each arm's method and parameters as the run sent them (runs/<arm>-<seed>.json)."""
CHECK = "pick_two"
COLUMNS = ("mixed", "logged", "whole", "scaled", "quality")
TOL = 1e-3


def mixed_groups(runs: Path, arm: str) -> Iterator[dict[str, Any]]:
    """The arm's logged groups with both right and wrong completions (the checker's verdict)."""
    for path in group_logs(runs, arm):
        for g in read_groups(path):
            ok = [a is not None for a in g["answers"]]
            if any(ok) and not all(ok):
                yield g


def inverted(rewards: list[float], right: list[bool]) -> bool:
    """A right completion's reward below a wrong one's."""
    return min(r for r, ok in zip(rewards, right, strict=True) if ok) < max(
        r for r, ok in zip(rewards, right, strict=True) if not ok
    )


def terms(g: dict[str, Any]) -> tuple[list[float], list[float]]:
    """(quality = 2 x cosine, format) per completion, recomputed; their sum is the logged base
    reward (ValueError otherwise: the split would not be the run's reward)."""
    n = len(g["completions"])
    q = [
        2.0 * c
        for c in cosine_scaled_correct_reward(
            [None] * n, g["completions"], [g["gold"]] * n, [CHECK] * n
        )
    ]
    f = answer_format_reward([None] * n, g["completions"])
    for a, b, base in zip(q, f, g["base_rewards"], strict=True):
        if abs(a + b - base) > 1e-9:
            raise ValueError(f"quality {a} + format {b} != logged base reward {base}")
    return q, f


class Vectors:
    """Every text's unit vector, encoded once for all the groups (one batched pass: the
    encoder's own batching, not 1,400 calls of 8 texts)."""

    def __init__(self, texts: list[str], embed: Any) -> None:
        unique = sorted(set(texts))
        v = torch.as_tensor(embed(unique), dtype=torch.float32)
        self.rows = dict(zip(unique, v / v.norm(dim=-1, keepdim=True), strict=True))

    def similarity(self, texts: list[str]) -> torch.Tensor:
        v = torch.stack([self.rows[t] for t in texts])
        return (v @ v.T).unsqueeze(0).to(torch.float64)


def reweight(
    arm: str,
    g: dict[str, Any],
    quality: list[float] | None,
    vectors: Vectors | None,
    guard: bool = True,
) -> list[float]:
    """The shipped method on one group, through the catalogue's one call (`MethodSpec.run`);
    `guard=False`: without its last step (`right_above_wrong`), quality scaled and rest added
    only."""
    spec = get_method(arm)
    params = spec.params_model.model_validate(ARMS[arm])
    r = torch.tensor([g["base_rewards"]], dtype=torch.float64)
    q = None if quality is None else torch.tensor([quality], dtype=torch.float64)
    sim = ctx = None
    if arm == "darling":
        given = [given_answer(t, g["gold"], CHECK) for t in g["completions"]]
        ctx = MethodContext(
            classes=torch.tensor([answer_labels(given)]),
            answered=torch.tensor([[a is not None for a in given]]),
        )
    else:
        assert vectors is not None, f"{arm} needs the completions' vectors"
        sim = vectors.similarity(g["completions"])
    if guard or q is None:
        new, _ = spec.run(r, sim, None, params, ctx, q)
    else:
        new, _ = spec.run(q, sim, None, params, ctx)
        new = new + (r - q)
    return new[0].tolist()


def replay(
    runs: Path = RUNS, arms: tuple[str, ...] = tuple(ARMS), embed: Any = None
) -> dict[str, dict[str, int]]:
    """{arm: {mixed, logged, whole, quality}}: mixed groups and their inversions per column.
    `embed(texts) -> [N, D]` vectors for DRA and MMR (default: the bundled encoder; Darling
    needs none: its classes come from the answers)."""
    groups = {arm: list(mixed_groups(runs, arm)) for arm in arms}
    vectors = None
    if any(arm != "darling" for arm in arms):
        texts = [
            t for arm in arms if arm != "darling" for g in groups[arm] for t in g["completions"]
        ]
        vectors = Vectors(texts, embed or default_embedder())
    table: dict[str, dict[str, int]] = {}
    for arm in arms:
        row = dict.fromkeys(COLUMNS, 0)
        for g in groups[arm]:
            right = [a is not None for a in g["answers"]]
            quality, _ = terms(g)
            whole = reweight(arm, g, None, vectors)
            _check_is_the_run(arm, g, whole)
            row["mixed"] += 1
            row["logged"] += inverted(g["rewards"], right)
            row["whole"] += inverted(whole, right)
            row["scaled"] += inverted(reweight(arm, g, quality, vectors, guard=False), right)
            row["quality"] += inverted(reweight(arm, g, quality, vectors), right)
        table[arm] = row
    return table


def _check_is_the_run(arm: str, g: dict[str, Any], whole: list[float]) -> None:
    """Where the shipped rule and the run's agree, the replay gives the logged rewards."""
    base = g["base_rewards"]
    if arm == "dra":
        same = [i for i, b in enumerate(base) if b > 0]
    elif arm == "mmr":
        same = list(range(len(base))) if min(base) >= 0 else []
    else:
        return  # Darling's run had the old no-answer rule (tests/research/test_darling_inversions)
    for i in same:
        if abs(whole[i] - g["rewards"][i]) > TOL * max(1.0, abs(g["rewards"][i])):
            raise AssertionError(
                f"{arm} step {g['step']} item {i}: replay {whole[i]} != logged {g['rewards'][i]}"
            )


def penalty_shares(runs: Path = RUNS, arm: str = "dra") -> dict[str, float]:
    """What the arm's logged run kept of each negative base reward (reweighted / base): the
    evidence for the penalty rules. DRA as run divided a penalty by its similarity sum, so a
    share below 1 is a penalty shrunk, mostly by repetition; MMR subtracted its novelty cost
    (a share above 1) after multiplying by λ (below 1)."""
    shares = [
        r / b
        for path in group_logs(runs, arm)
        for g in read_groups(path)
        for b, r in zip(g["base_rewards"], g["rewards"], strict=True)
        if b < 0
    ]
    shares.sort()
    n = len(shares)
    return {
        "penalties": n,
        "median": (shares[(n - 1) // 2] + shares[n // 2]) / 2,
        "min": shares[0],
        "below_half": sum(x < 0.5 for x in shares) / n,
    }


def default_embedder() -> Any:
    """The service's encoder, the bundled model with its defaults (what the runs' service
    used), eager on the CPU."""
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    encoder = SentenceTransformerEncoder.load(None, device="cpu", compile="off")
    return lambda texts: encoder.encode(list(texts))


def markdown(table: dict[str, dict[str, int]]) -> str:
    lines = [
        "| method | mixed groups | logged (as run) | whole reward (shipped) "
        "| quality scaled, rest added | quality given (shipped) |",
        "|---|---|---|---|---|---|",
    ]
    for arm, row in table.items():
        lines.append("| " + " | ".join([arm, *(str(row[c]) for c in COLUMNS)]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else RUNS
    print(markdown(replay(where)))
    for arm in ("dra", "mmr"):
        print(f"{arm} as run kept of its penalties: {penalty_shares(where, arm)}")
