"""Plots of an experiment's results.json: `python -m reweighter_trainer.plots OUT`.

reward.png      training reward (base reward, before reweighting) per step, mean over seeds,
                band = min..max over seeds
heldout.png     held-out pass@k, greedy accuracy and distinct correct solutions per method
                (dashed: the untrained policy, when the experiment ran --base-eval)
similarity.png  mean within-group similarity of the training completions per step
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLORS = {"grpo": "tab:gray", "dra": "tab:blue", "mmr": "tab:orange"}


def _by_method(runs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in runs:
        out.setdefault(r["method"], []).append(r)
    return out


def _band(ax, curves: list[list[float]], label: str, color: str) -> None:
    import numpy as np

    n = min(len(c) for c in curves)
    if n == 0:
        return
    a = np.array([c[:n] for c in curves], dtype=float)
    steps = np.arange(1, n + 1)
    ax.plot(steps, a.mean(0), label=f"{label} ({len(curves)} seed{'s' * (len(curves) > 1)})",
            color=color, marker="o", ms=3)
    if len(curves) > 1:
        ax.fill_between(steps, a.min(0), a.max(0), color=color, alpha=0.2)


def plot(out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    results = json.loads((out / "results.json").read_text())
    groups = _by_method(results["runs"])
    title = f"{results['model']} on {results['task']['name']}"
    written = []

    for name, key, ylabel in (
        ("reward.png", "reward_curve", "training accuracy (base reward, G=8)"),
        ("similarity.png", "similarity_curve", "mean pairwise cosine in the group"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for method, runs in groups.items():
            _band(ax, [r.get(key, []) for r in runs], method, COLORS.get(method, "k"))
        ax.set_xlabel("GRPO step")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(out / name)

    k = results["task"].get("k", 8)
    metrics = (
        ("pass_at_k", f"pass@{k}"),
        ("accuracy", "greedy accuracy"),
        ("distinct_correct", "distinct correct / prompt"),
    )
    fig, axes = plt.subplots(1, len(metrics), figsize=(11, 3.6))
    methods = list(groups)
    for ax, (key, label) in zip(axes, metrics, strict=True):
        vals = [[r[key] for r in groups[m]] for m in methods]
        means = [float(np.mean(v)) for v in vals]
        errs = [float(np.std(v)) if len(v) > 1 else 0.0 for v in vals]
        ax.bar(methods, means, yerr=errs, capsize=4,
               color=[COLORS.get(m, "k") for m in methods])
        for i, v in enumerate(vals):  # every seed as a dot: the bars hide how few there are
            ax.scatter([i] * len(v), v, color="k", s=12, zorder=3)
        if key in results.get("untrained", {}):
            ax.axhline(results["untrained"][key], color="k", ls="--", lw=1, label="untrained")
            ax.legend(fontsize=8)
        ax.set_title(f"held-out {label}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{title}: {results['task']['eval_prompts']} held-out prompts", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "heldout.png", dpi=110)
    plt.close(fig)
    written.append(out / "heldout.png")
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m reweighter_trainer.plots OUT_DIR (holding results.json)")
        return 2
    for p in plot(Path(args[0])):
        print(f"[plots] wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
