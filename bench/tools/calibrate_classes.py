"""Calibrate `class_threshold`: how well do embedding components recover answer classes?

Reads the logged groups of a pickone experiment (default: experiments/pickone-6seed, 12 runs x
40 steps, groups of 8), takes each completion's true answer class from its last "Answer:" line
(reweighter_trainer.rewards.extract_pick: the one item of the prompt's domain it names; a
completion naming none is a class of its own, as a null answer is), embeds the completions
with the service's default encoder (all-MiniLM-L6-v2, bundled), and for each threshold forms
the connected components of `cosine >= threshold` (reweighter.methods.similarity_classes, the
code the service runs). Scores per threshold, over all pairs i < j inside each group:

- pair F1: "same class" predicted vs true (precision: joined pairs that truly share an answer);
- class-count error: mean |predicted classes - true classes| per group.

Prints a markdown table and the threshold with the best pair F1.

    .venv/bin/python bench/tools/calibrate_classes.py [--runs experiments/pickone-6seed/runs]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from reweighter.config import Settings
from reweighter.embedding import build_embedder
from reweighter.methods import class_counts, cosine_similarity, similarity_classes
from reweighter.methods.classes import answer_labels
from reweighter_research.decision import group_logs, read_groups
from reweighter_trainer.data import PICK_CATEGORIES
from reweighter_trainer.rewards import extract_pick

THRESHOLDS = [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94, 0.96, 0.98]


def load(runs: Path) -> list[tuple[list[str], list[str | None]]]:
    groups = []
    for path in group_logs(runs):  # plain, or gzipped as the committed runs are
        for row in read_groups(path):
            domain = PICK_CATEGORIES[row["gold"]][0]
            texts = row["completions"]
            groups.append((texts, [extract_pick(t, domain) for t in texts]))
    return groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=Path("experiments/pickone-6seed/runs"))
    args = ap.parse_args()
    groups = load(args.runs)
    texts = sorted({t for g, _ in groups for t in g})
    embedder = build_embedder(Settings())
    vecs = dict(zip(texts, embedder.encode(texts), strict=True))
    embedder.close()

    sims, truth = [], []
    for g, answers in groups:
        sims.append(cosine_similarity(torch.from_numpy(np.stack([vecs[t] for t in g]))))
        truth.append(torch.tensor(answer_labels(answers)))
    sim = torch.stack(sims)
    true = torch.stack(truth)
    g = sim.shape[-1]
    upper = torch.ones(g, g, dtype=torch.bool).triu(1)
    true_same = (true.unsqueeze(-1) == true.unsqueeze(-2)) & upper
    true_classes = class_counts(true)
    print(
        f"{len(groups)} groups of {g} from {args.runs}; {len(texts)} distinct completions; "
        f"{int(true_same.sum())} of {int(upper.sum()) * len(groups)} pairs share an answer; "
        f"true classes per group: mean {true_classes.float().mean():.2f}\n"
    )
    print("| threshold | pair precision | pair recall | pair F1 | class-count error |")
    print("|---|---|---|---|---|")
    best = (0.0, 0.0)
    for t in THRESHOLDS:
        labels = similarity_classes(sim, None, t)
        pred_same = (labels.unsqueeze(-1) == labels.unsqueeze(-2)) & upper
        tp = int((pred_same & true_same).sum())
        prec = tp / max(1, int(pred_same.sum()))
        rec = tp / max(1, int(true_same.sum()))
        f1 = 2 * prec * rec / max(1e-12, prec + rec)
        err = (class_counts(labels) - true_classes).abs().float().mean().item()
        print(f"| {t:.2f} | {prec:.3f} | {rec:.3f} | {f1:.3f} | {err:.2f} |")
        best = max(best, (f1, t))
    print(f"\nbest pair F1 {best[0]:.3f} at threshold {best[1]:.2f}")


if __name__ == "__main__":
    main()
