"""The gate before training: can the experiment on this task decide anything at all?

    python -m reweighter_research.gate --task picktwo --out experiments/picktwo-gate

On the untrained policy (SmolLM2-135M-Instruct), 32 prompts x 8 samples at the training
temperature and completion budget:

1. accuracy must lie in the task's band (BANDS: picktwo [0.1, 0.4], leaving GRPO room to climb
   within a CPU budget; pickone's gate used [0.2, 0.6]): below, groups of 8 are mostly all
   wrong and GRPO has no signal; above, it has little room;
2. the embedder (the service's all-MiniLM-L6-v2, in process) must see the diversity the metric
   counts: two correct completions giving *different* answers must be measurably less similar
   than two giving the *same* answer (within one prompt; 95 % interval over prompts above 0).
   If it cannot, the similarity-based methods cannot tell the answers apart: a finding in
   itself.

Both numbers come with a cluster-bootstrap interval (prompts resampled: samples of one prompt
are not independent). Writes OUT/gate.json and prints a one-line verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BANDS = {"pickone": (0.2, 0.6), "picktwo": (0.1, 0.4), "wordadd": (0.05, 0.4)}
SAME_PATH = 0.9
"""wordadd's embedder condition: its answer is one number, so "same vs different answer" is
empty; what the similarity methods need is that correct completions reached by different paths
do not look identical. The gate asks that the mean within-prompt cosine among correct
completions has its 95 % upper bound below this (metrics.DISTINCT_THRESHOLD: the cosine at
which two correct completions count as the same solution)."""


def correct_similarity(prompts: list[dict[str, Any]]) -> dict[str, Any]:
    """wordadd's gate figures over per-prompt records {correct, cos_correct}: the share of
    groups with >= 2 correct (where a group can hold two solutions at all), the mean
    within-prompt cosine among correct completions (mean over prompts of each prompt's mean,
    bootstrap over prompts) and the share of correct pairs at or above SAME_PATH."""
    two = [p for p in prompts if sum(p["correct"]) >= 2]
    # Each group's mean once, then the bootstrap resamples those (the same draws as resampling
    # the groups: thousands of logged groups would otherwise take a minute).
    means = [float(np.mean(p["cos_correct"])) if p["cos_correct"] else None for p in two]

    def mean_cos(ms):
        m = [x for x in ms if x is not None]
        return float(np.mean(m)) if m else None

    pairs = [c for p in two for c in p["cos_correct"]]
    ci = bootstrap(means, mean_cos) if len(two) >= 3 else None
    return {
        "groups_with_two_correct": len(two),
        "share_groups_two_correct": len(two) / len(prompts) if prompts else None,
        "correct_pairs": len(pairs),
        "mean_similarity_correct": mean_cos(means),
        "mean_similarity_correct_ci95": ci,
        "share_correct_pairs_same_path": float(np.mean([c >= SAME_PATH for c in pairs]))
        if pairs else None,
        "same_path_threshold": SAME_PATH,
        "correct_paths_distinct": ci is not None and ci[1] < SAME_PATH,
    }


def similarity_pairs(
    emb: np.ndarray, answers: list[str | None]
) -> tuple[list[float], list[float]]:
    """Cosines of the correct completions of one prompt: (same answer pairs, different answer
    pairs). `answers[i]` is completion i's answer, None when it is wrong."""
    e = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    same, diff = [], []
    ok = [i for i, p in enumerate(answers) if p is not None]
    for a in range(len(ok)):
        for b in range(a + 1, len(ok)):
            i, j = ok[a], ok[b]
            (same if answers[i] == answers[j] else diff).append(float(e[i] @ e[j]))
    return same, diff


def bootstrap(values: list[Any], stat, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of stat(resample) over resamples of `values` (the clusters)."""
    rng = np.random.default_rng(seed)
    k = len(values)
    draws = [stat([values[i] for i in rng.integers(0, k, k)]) for _ in range(n)]
    draws = [d for d in draws if d is not None and np.isfinite(d)]
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def summarise(prompts: list[dict[str, Any]], band: tuple[float, float] = BANDS["picktwo"]
              ) -> dict[str, Any]:
    """The gate's numbers from per-prompt records {correct: [bool], same: [cos], diff: [cos]}."""

    def acc(ps):
        n = sum(len(p["correct"]) for p in ps)
        return sum(sum(p["correct"]) for p in ps) / n if n else None

    def gap(ps):  # within-prompt mean(same) - mean(diff), over prompts that have both
        d = [np.mean(p["same"]) - np.mean(p["diff"]) for p in ps if p["same"] and p["diff"]]
        return float(np.mean(d)) if d else None

    accuracy = acc(prompts)
    both = [p for p in prompts if p["same"] and p["diff"]]
    out: dict[str, Any] = {
        "prompts": len(prompts),
        "samples": sum(len(p["correct"]) for p in prompts),
        "accuracy": accuracy,
        "accuracy_ci95": bootstrap(prompts, acc),
        "distinct_correct_per_prompt": float(np.mean([p["distinct"] for p in prompts])),
        "prompts_with_same_and_different_pairs": len(both),
        "mean_similarity_same_answer": float(np.mean([s for p in prompts for s in p["same"]]))
        if any(p["same"] for p in prompts) else None,
        "mean_similarity_different_answer": float(np.mean([s for p in prompts for s in p["diff"]]))
        if any(p["diff"] for p in prompts) else None,
        "similarity_gap": gap(prompts),
        "similarity_gap_ci95": bootstrap(both, gap) if len(both) >= 3 else None,
    }
    rates = [sum(p["correct"]) / len(p["correct"]) for p in prompts if p["correct"]]
    out["groups_all_wrong"] = sum(r == 0 for r in rates)
    out["groups_all_right"] = sum(r == 1 for r in rates)
    out["between_prompt_var"] = between_prompt_variance(prompts)
    in_band = accuracy is not None and band[0] <= accuracy <= band[1]
    sees = out["similarity_gap_ci95"] is not None and out["similarity_gap_ci95"][0] > 0
    if all("cos_correct" in p for p in prompts):  # wordadd: one answer, several paths
        out.update(correct_similarity(prompts))
        sees = out["correct_paths_distinct"]
    out["accuracy_in_band"] = in_band
    out["embedder_sees_diversity"] = sees
    out["passed"] = bool(in_band and sees)
    return out


def between_prompt_variance(prompts: list[dict[str, Any]]) -> float | None:
    """Var over prompts of their true accuracy (method of moments: the variance of the
    per-prompt rates less the binomial part, mean p(1-p)/(g-1)): the part of one step's
    variance that more prompts per step divide, and fewer completions per prompt do not."""
    rates = [(sum(p["correct"]), len(p["correct"])) for p in prompts if len(p["correct"]) > 1]
    if len(rates) < 2:
        return None
    r = np.array([c / g for c, g in rates])
    within = np.mean([x * (1 - x) / (g - 1) for x, (_, g) in zip(r, rates, strict=True)])
    return float(max(np.var(r, ddof=1) - within, 0.0))


def from_groups(groups: list[dict[str, Any]], embed, band: tuple[float, float] = BANDS["picktwo"],
                paths: bool = False) -> dict[str, Any]:
    """`summarise` over logged training groups (experiment.StepRecorder's JSONL lines: their
    `completions` and `answers`, None where wrong) instead of fresh samples: the embedder
    condition measured again on many more prompts (the pilot's GRPO groups). `embed(texts) ->
    [N, D] array`. Its accuracy is the training accuracy of those steps, not the untrained
    policy's: only the similarity figures are the gate's.

    `paths` (wordadd: one answer, several paths): the cosines among correct completions are
    the figure (correct_similarity), and each group's record (its step, its source and its
    correct-pair cosines, rounded to 1e-6) is returned under `per_group`, so that a test
    recomputes the figure from the committed file without the encoder."""
    records = []
    for g in groups:
        answer = list(g["answers"])
        emb = np.asarray(embed(g["completions"]), dtype=np.float64)
        same, diff = similarity_pairs(emb, answer)
        rec: dict[str, Any] = {"correct": [a is not None for a in answer], "same": same,
                               "diff": diff, "distinct": len({a for a in answer if a})}
        if paths:
            rec["cos_correct"] = [round(c, 6) for c in same]
            rec["same"] = rec["cos_correct"]
        records.append(rec)
    out = summarise(records, band)
    if paths:
        out["per_group"] = [
            {"source": g.get("source"), "step": g.get("step"), "correct": r["correct"],
             "cos_correct": r["cos_correct"]}
            for g, r in zip(groups, records, strict=True)
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for gate.json")
    p.add_argument("--task", choices=sorted(BANDS), default="picktwo")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--max-new", type=int, default=48, help="completion tokens")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--groups", nargs="+", metavar="JSONL",
                   help="measure the embedder condition on logged training groups "
                        "(runs/grpo-*.groups.jsonl, or .jsonl.gz) instead of sampling; "
                        "writes OUT/groups_gap.json")
    a = p.parse_args(argv)
    if a.groups:
        from reweighter.client.local import LocalClient

        from .decision import read_groups

        # source: the log's name without .gz (the logs were gzipped after groups_gap.json)
        groups = [{**g, "source": Path(path).name.removesuffix(".gz")}
                  for path in a.groups for g in read_groups(path)]
        with LocalClient() as client:
            got = from_groups(groups, lambda t: client.embed(list(t)).embeddings, BANDS[a.task],
                              paths=a.task == "wordadd")
        got["groups_from"] = a.groups
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "groups_gap.json").write_text(json.dumps(got, indent=2))
        print(json.dumps({k: v for k, v in got.items() if k != "per_group"}, indent=2))
        return 0

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reweighter.client.local import LocalClient
    from reweighter_trainer.data import generate_pickone, generate_picktwo, generate_wordadd
    from reweighter_trainer.policy import smollm2_path
    from reweighter_trainer.rewards import correct_answer

    from .experiment import _generate

    torch.manual_seed(a.seed)
    path = smollm2_path()
    if a.task == "wordadd":  # the train split's generator, as load_dataset uses it
        from reweighter_trainer.data import WORD_SEEDS

        rows = generate_wordadd(a.prompts, WORD_SEEDS["train"])
    else:
        rows = (generate_picktwo if a.task == "picktwo" else generate_pickone)(a.prompts, "train")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    t0 = time.perf_counter()
    groups = _generate(model, tok, [r["prompt"] for r in rows], a.samples, False, a.max_new,
                       a.seed, a.temperature)
    gen_s = time.perf_counter() - t0
    with LocalClient() as client:
        records = []
        for row, group in zip(rows, groups, strict=True):
            answer = [correct_answer(t, row["answer"], row.get("check")) for t in group]
            ok = [x is not None for x in answer]
            emb = np.asarray(client.embed(group).embeddings, dtype=np.float64)
            same, diff = similarity_pairs(emb, answer)
            extra = {"cos_correct": same} if a.task == "wordadd" else {}
            records.append({**extra,
                "prompt": row["prompt"][-1]["content"], "category": row["answer"],
                "correct": ok, "answers": answer,
                "distinct": len({x for x in answer if x}), "same": same, "diff": diff,
                "completions": group,
            })
    result = summarise(records, BANDS[a.task])
    chars = [len(t) for r in records for t in r["completions"]]
    result.update(
        policy="SmolLM2-135M-Instruct", task=a.task, max_new_tokens=a.max_new,
        temperature=a.temperature, seed=a.seed, generation_s=round(gen_s, 1),
        embedder="all-MiniLM-L6-v2 (in process)", band=list(BANDS[a.task]),
        completion_chars={"median": float(np.median(chars)), "p90": float(np.percentile(chars, 90)),
                          "max": max(chars)},
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gate.json").write_text(json.dumps({**result, "per_prompt": records}, indent=2))
    print(json.dumps(result, indent=2))
    if a.task == "wordadd":
        print(f"[gate] groups with >= 2 correct {result['share_groups_two_correct']:.3f}, "
              f"mean cosine among correct {result['mean_similarity_correct']} "
              f"{result['mean_similarity_correct_ci95']} (distinct paths below {SAME_PATH})")
    print(f"[gate] {'PASSED' if result['passed'] else 'FAILED'}: accuracy "
          f"{result['accuracy']:.3f} {result['accuracy_ci95']}, similarity gap "
          f"{result['similarity_gap']} {result['similarity_gap_ci95']}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
