"""The instrument's resolution: how well a similarity tells same-answer pairs from different-answer
pairs inside a group, on the committed groups.

DRA, MMR and Darling's semantic part all act on *within-group* similarities: a completion is
down-weighted for being like its siblings. The question here is whether the similarity sees what
those methods mean by "redundant": two completions giving the same answer should sit closer than
two giving different answers. Measured on the logged training groups of picktwo-main (every arm)
and wordadd-main (GRPO's 12 runs, and the MMR runs the device call cut short), with the answers
the tasks' own parser reads (`rewards.given_answer`: the number after the last "Answer:", or the
sorted pair of items named there).

Pairs: every unordered pair (i, j) of one group whose two completions both give an answer.
*same*: the two answers are equal strings. Two pair sets:

- `answered`: every such pair (wrong answers included: wordadd's only contrast, since each
  wordadd prompt has one correct answer);
- `correct`: both completions right by the task's checker (picktwo: 3-66 correct pairs of items
  per prompt, so "different" means two distinct correct answers, what MMR and DRA are meant to
  keep: the distinct-correct-answers resolution).

The score is the **within-group AUC**: over every (same pair, different pair) of one group, the
share in which the same-answer pair is the more similar (ties count a half), pooled over groups
(each group weighted by its same x different comparisons). Only within-group comparisons count,
because the methods never compare a similarity of one group with another's. Its 95 % interval is
a cluster bootstrap over groups (`BOOT` resamples, seed `SEED`); the difference of a candidate to
raw cosine is bootstrapped on the same resamples (paired).

Candidates (`SIMILARITIES`):

- `cosine`: the service's similarity today, cosine of the bundled all-MiniLM-L6-v2 embeddings
  (the service's encoder, `inversions.default_embedder`);
- `centred`: the same embeddings minus the group's mean embedding (over all its completions),
  renormalised, then cosine (what ExTra, arXiv 2606.24994, does before its novelty score): what
  every sibling shares (the prompt's topic, the "Answer:" template) is taken out;
- `lexical`: Jaccard overlap of the two completions' lower-cased word sets: no model at all, the
  baseline that says whether MiniLM sees more than shared words, and task-agnostic like the
  first two (an answer-aware similarity would need the task's parser, which the service has only
  as `answers`, and Darling already uses those exactly).

    python -m reweighter_research.resolution            # the EXPERIMENTS.md table (read-only)
    python -m reweighter_research.resolution --boot 200 # fewer resamples, faster

Embedding every unique completion takes a few minutes on a 2-core CPU (wordadd's ~8,600 long
ones most of it); the test recomputes a subset of groups (tests/research/test_resolution.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .decision import read_groups

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
SIMILARITIES = ("cosine", "centred", "lexical")
PAIR_SETS = ("answered", "correct")
BOOT = 2000
SEED = 0
LEVEL = 0.95
CLEAR_WIN = 0.0
"""A candidate wins clearly when the lower bound of its paired difference to raw cosine's AUC is
above this on every task's pooled row of both pair sets that exist there (fixed before the table
was computed)."""

SOURCES: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "picktwo": ("picktwo-main", "pick_two", ("grpo", "mmr", "dra", "darling", "grpo-passk")),
    "wordadd": ("wordadd-main", None, ("grpo", "mmr")),
}
"""task -> (folder under experiments/, the checker's `check`, the arms whose groups were logged)."""

_WORD = re.compile(r"\w+")


def arm_logs(folder: Path, arm: str) -> list[Path]:
    """runs/<arm>-<seed>.groups.jsonl(.gz) of exactly this arm (`grpo` not `grpo-passk`),
    sorted by seed."""
    pat = re.compile(rf"{re.escape(arm)}-(\d+)\.groups\.jsonl(\.gz)?$")
    found = [(int(m.group(1)), p) for p in (folder / "runs").iterdir() if (m := pat.match(p.name))]
    return [p for _, p in sorted(found)]


def load_groups(task: str, arm: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The arm's logged groups with, per completion, `given` (the answer it gives, right or
    wrong, None when none) and `right` (the checker accepts it). `limit`: the first groups of
    each run only (the test's subset)."""
    from reweighter_trainer.rewards import correct_answer, given_answer

    folder, check, _ = SOURCES[task]
    out = []
    for path in arm_logs(EXPERIMENTS / folder, arm):
        for g in read_groups(path)[:limit]:
            texts = g["completions"]
            out.append(
                {
                    "completions": texts,
                    "given": [given_answer(t, g["gold"], check) for t in texts],
                    "right": [correct_answer(t, g["gold"], check) is not None for t in texts],
                }
            )
    return out


def words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a & b| / |a | b|; 1 for two empty sets (two empty texts are the same text)."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(n > 0, n, 1.0)


def similarities(vectors: np.ndarray, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """Each candidate's [G, G] similarity matrix for one group (`vectors`: its embeddings)."""
    v = unit(np.asarray(vectors, dtype=np.float64))
    c = unit(v - v.mean(axis=0, keepdims=True))
    w = [words(t) for t in texts]
    lex = np.array([[jaccard(a, b) for b in w] for a in w])
    return {"cosine": v @ v.T, "centred": c @ c.T, "lexical": lex}


def concordance(same: np.ndarray, diff: np.ndarray) -> float:
    """Over every (same, diff) score pair: 1 where same > diff, 1/2 where equal (Mann-Whitney)."""
    if not len(same) or not len(diff):
        return 0.0
    d = np.subtract.outer(np.asarray(same, float), np.asarray(diff, float))
    return float((d > 0).sum() + 0.5 * (d == 0).sum())


@dataclass
class GroupCounts:
    """One group's contribution to one pair set: concordant comparisons per similarity, and the
    number of comparisons (same pairs x different pairs), with the pair counts."""

    concordant: dict[str, float]
    comparisons: int
    same: int
    diff: int


def group_counts(g: dict[str, Any], sims: dict[str, np.ndarray], pair_set: str) -> GroupCounts:
    """`g`'s pairs in `pair_set` ("answered" or "correct") scored by every similarity."""
    keep = [
        i
        for i, a in enumerate(g["given"])
        if a is not None and (pair_set == "answered" or g["right"][i])
    ]
    same_ij, diff_ij = [], []
    for x, i in enumerate(keep):
        for j in keep[x + 1 :]:
            (same_ij if g["given"][i] == g["given"][j] else diff_ij).append((i, j))
    con = {}
    for name, s in sims.items():
        con[name] = concordance([s[i, j] for i, j in same_ij], [s[i, j] for i, j in diff_ij])
    return GroupCounts(con, len(same_ij) * len(diff_ij), len(same_ij), len(diff_ij))


def auc(counts: Sequence[GroupCounts], name: str) -> float:
    total = sum(c.comparisons for c in counts)
    return sum(c.concordant[name] for c in counts) / total if total else float("nan")


def bootstrap(
    counts: Sequence[GroupCounts],
    names: Sequence[str] = SIMILARITIES,
    boot: int = BOOT,
    seed: int = SEED,
    level: float = LEVEL,
) -> dict[str, Any]:
    """Per similarity: the within-group AUC and its cluster-bootstrap interval (groups resampled
    with replacement); per candidate but the first: its paired difference to the first."""
    use = [c for c in counts if c.comparisons]
    con = np.array([[c.concordant[n] for n in names] for c in use]).reshape(len(use), len(names))
    tot = np.array([c.comparisons for c in use], dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(use), size=(boot, len(use))) if use else np.zeros((boot, 0), int)
    # every resample: a count per group, then the pooled ratio (one matrix product)
    weights = np.zeros((boot, len(use)))
    for b in range(boot):
        weights[b] = np.bincount(idx[b], minlength=len(use))
    with np.errstate(invalid="ignore", divide="ignore"):
        res = (weights @ con) / (weights @ tot)[:, None]
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    out: dict[str, Any] = {
        "groups": len(use),
        "same_pairs": int(sum(c.same for c in use)),
        "diff_pairs": int(sum(c.diff for c in use)),
        "comparisons": int(tot.sum()),
    }
    for k, n in enumerate(names):
        point = float(con[:, k].sum() / tot.sum()) if len(use) else float("nan")
        out[n] = {
            "auc": point,
            "interval": [
                float(np.nanquantile(res[:, k], lo_q)),
                float(np.nanquantile(res[:, k], hi_q)),
            ],
        }
        if k:
            d = res[:, k] - res[:, 0]
            out[n]["minus_" + names[0]] = {
                "diff": point - out[names[0]]["auc"],
                "interval": [float(np.nanquantile(d, lo_q)), float(np.nanquantile(d, hi_q))],
            }
    return out


class Embeddings:
    """Every unique text embedded once by `embed(texts) -> [N, D]` (the service's encoder)."""

    def __init__(self, texts: Iterable[str], embed: Callable[[list[str]], Any]) -> None:
        unique = sorted(set(texts))
        v = np.asarray(embed(unique), dtype=np.float64) if unique else np.zeros((0, 1))
        self.rows = {t: v[i] for i, t in enumerate(unique)}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.rows[t] for t in texts])


def measure(
    groups: dict[str, list[dict[str, Any]]],
    embed: Callable[[list[str]], Any],
    boot: int = BOOT,
    seed: int = SEED,
) -> dict[str, dict[str, Any]]:
    """{row name: bootstrap(...)} for every (label, pair set) with pairs of both kinds; `groups`
    maps a row label ("picktwo grpo") to its groups. Each label's rows use the same resamples
    for every similarity, so the differences are paired."""
    vectors = Embeddings((t for gs in groups.values() for g in gs for t in g["completions"]), embed)
    table: dict[str, dict[str, Any]] = {}
    for label, gs in groups.items():
        per = {p: [] for p in PAIR_SETS}
        for g in gs:
            sims = similarities(vectors(g["completions"]), g["completions"])
            for p in PAIR_SETS:
                per[p].append(group_counts(g, sims, p))
        for p in PAIR_SETS:
            if sum(c.comparisons for c in per[p]):
                table[f"{label} | {p}"] = bootstrap(per[p], boot=boot, seed=seed)
    return table


def committed_groups(limit: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """The table's rows: each task's arms one by one, then the task's arms pooled."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for task, (_, _, arms) in SOURCES.items():
        every = []
        for arm in arms:
            gs = load_groups(task, arm, limit)
            rows[f"{task} {arm}"] = gs
            every += gs
        rows[f"{task} all arms"] = every
    return rows


def verdict(table: dict[str, dict[str, Any]], candidate: str, base: str = "cosine") -> bool:
    """CLEAR_WIN: the candidate's paired-difference lower bound above CLEAR_WIN on every pooled
    row ("<task> all arms | <pair set>")."""
    pooled = [row for name, row in table.items() if " all arms | " in name]
    return bool(pooled) and all(
        row[candidate][f"minus_{base}"]["interval"][0] > CLEAR_WIN for row in pooled
    )


def markdown(table: dict[str, dict[str, Any]]) -> str:
    def cell(row: dict[str, Any], n: str) -> str:
        a = row[n]
        s = f"{a['auc']:.3f} ({a['interval'][0]:.3f}-{a['interval'][1]:.3f})"
        if "minus_cosine" in a:
            d = a["minus_cosine"]
            s += f"; {d['diff']:+.3f} ({d['interval'][0]:+.3f} to {d['interval'][1]:+.3f})"
        return s

    lines = [
        "| groups | pairs | n groups | same / different pairs | cosine | centred; - cosine "
        "| lexical; - cosine |",
        "|---|---|---:|---:|---|---|---|",
    ]
    for name, row in table.items():
        label, pairs = name.split(" | ")
        lines.append(
            f"| {label} | {pairs} | {row['groups']} | {row['same_pairs']} / {row['diff_pairs']} | "
            + " | ".join(cell(row, n) for n in SIMILARITIES)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--boot", type=int, default=BOOT, help="bootstrap resamples")
    p.add_argument("--limit", type=int, help="the first groups of each run only")
    opts = p.parse_args(argv)
    from .inversions import default_embedder

    table = measure(committed_groups(opts.limit), default_embedder(), boot=opts.boot)
    print(markdown(table))
    for n in SIMILARITIES[1:]:
        print(
            f"{n} wins clearly over cosine (every pooled row's paired lower bound > "
            f"{CLEAR_WIN}): {verdict(table, n)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
