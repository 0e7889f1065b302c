"""Plots of an experiment's results.json: `python -m reweighter_research.plots OUT`.

reward.png      training reward (base reward, before reweighting) per step, mean over seeds,
                band = min..max over seeds
heldout.png     held-out pass@k, greedy accuracy and distinct correct solutions per method
                (dashed: the untrained policy, when the experiment ran --base-eval)
similarity.png  mean within-group similarity of the training completions per step
paired.png      (with a decision) per seed, GRPO's and MMR's trailing-10-step training accuracy,
                GRPO's peak (the target) dashed and the steps each arm needed to reach it
ratios.png      (with a decision) per seed, steps MMR needed / steps GRPO needed; 1 = as fast,
                the paper's claim 0.52, the rule's threshold 0.75
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLORS = {"grpo": "tab:gray", "dra": "tab:blue", "mmr": "tab:orange", "mmr-keep": "tab:red"}


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

    accuracy_key = "accuracy_curve" if all("accuracy_curve" in r for r in results["runs"]) \
        else "reward_curve"
    for name, key, ylabel in (
        ("reward.png", accuracy_key, "training accuracy (G=8)"),
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
    if "per_seed" in results.get("decision", {}):  # the ratio rule (pickone)
        written += _decision_plots(results, out, plt)
    return written


def _decision_plots(results: dict, out: Path, plt) -> list[Path]:
    from .metrics import CLAIM, WINDOW, trailing

    d = results["decision"]
    base, arm = d["arms"]
    by = {(r["method"], r["seed"]): r for r in results["runs"]}
    seeds = [int(s) for s in d["per_seed"]]
    cols = min(3, max(1, len(seeds)))
    rows = -(-len(seeds) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, s in zip(axes.flat, seeds, strict=False):
        info = d["per_seed"][str(s)]
        for m in (base, arm):
            curve = by[(m, s)].get("accuracy_curve", [])
            t = trailing(curve, WINDOW)
            ax.plot(range(1, len(curve) + 1), curve, color=COLORS.get(m, "k"), alpha=0.25, lw=1)
            ax.plot(range(WINDOW, WINDOW + len(t)), t, color=COLORS.get(m, "k"), lw=2, label=m)
        if info.get("target") is not None:
            ax.axhline(info["target"], color="k", ls="--", lw=1)
        for key, m in (("steps_grpo", base), ("steps_mmr", arm)):
            if info.get(key):
                ax.axvline(info[key], color=COLORS.get(m, "k"), ls=":", lw=1)
        ratio = info.get("ratio")
        ax.set_title(f"seed {s}: ratio {'never' if ratio is None else f'{ratio:.2f}'}"
                     f"{'' if info.get('informative') else ' (uninformative)'}", fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(seeds):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    axes.flat[0].set_ylabel(f"train accuracy (thick: {WINDOW}-step mean)")
    fig.suptitle(f"{base} vs {arm}, paired by seed: verdict {d['verdict']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "paired.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    top = max([v["ratio"] for v in d["per_seed"].values() if v.get("ratio")] + [1.5])
    for i, s in enumerate(seeds):
        info = d["per_seed"][str(s)]
        r = info.get("ratio")
        y = r if r is not None else top * 1.1
        ax.scatter([i], [y], color="tab:orange" if info.get("informative") else "lightgray",
                   marker="o" if r is not None else "^", s=40, zorder=3)
    ax.axhline(1.0, color="k", lw=1, label="as fast as GRPO")
    ax.axhline(CLAIM, color="k", ls="--", lw=1, label=f"rule threshold {CLAIM}")
    ax.axhline(0.52, color="tab:green", ls=":", lw=1, label="paper's claim 0.52")
    ax.set_xticks(range(len(seeds)), [str(s) for s in seeds])
    ax.set_xlabel("seed (gray: uninformative; triangle: never reached)")
    ax.set_ylabel("steps MMR / steps GRPO")
    ax.set_title(f"per-seed ratio: {d['verdict']}", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "ratios.png", dpi=110)
    plt.close(fig)
    return [out / "paired.png", out / "ratios.png"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m reweighter_research.plots OUT_DIR (holding results.json)")
        return 2
    for p in plot(Path(args[0])):
        print(f"[plots] wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
