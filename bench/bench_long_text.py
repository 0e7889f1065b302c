"""Benchmark: the cost of long completions per `long_text` policy, for the reference step.

The reference step (docs/embedding.md, cost model): 4,096 completions of ~2,000 word pieces,
what a step at the papers' scale hands the service (e.g. 512 prompts x G=8 chains of thought).
For each policy: the windows one completion becomes, the tokens the encoder runs for the step,
and the step's seconds, measured in process through our encoder's batched path
(`encoder.encode`: tokenise, window, length-sorted token-budget batches, pool) on a sample of
`--n` fresh completions and scaled to 4,096; tokenising alone is timed apart (host CPU, the
same for every policy). Diagnosis in process: the served figure adds the host path
(bench_host_path.py).

    .venv/bin/python bench/bench_long_text.py                    # CPU, 32 completions a policy
    python bench/bench_long_text.py --device cuda --n 1024       # a GPU
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_embed import completion  # noqa: E402

REFERENCE = 4096
POLICIES = ("head", "tail", "spread", "chunk_mean")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=32, help="completions measured per policy and run")
    ap.add_argument("--tokens", type=int, default=2000, help="word pieces per completion")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--compile", default="off", choices=["auto", "on", "off"])
    args = ap.parse_args()

    import torch

    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    base = SentenceTransformerEncoder.load(None, device=args.device, compile=args.compile)
    if base.compile_state == "compiling":
        base.backend.thread.join(900)
    tok = base.model.tokenizer

    def count(t: str) -> int:
        return len(tok(t, add_special_tokens=False, verbose=False)["input_ids"])

    rng = random.Random(11)
    base.encode([completion(rng, args.tokens, count) for _ in range(8)])  # warm
    rows: dict[str, dict[str, list[float]]] = {p: {"s": [], "tok_s": []} for p in POLICIES}
    windows: dict[str, float] = {}
    tokens: dict[str, float] = {}
    for run in range(args.runs):
        texts = [completion(rng, args.tokens, count) for _ in range(args.n)]
        t0 = time.perf_counter()
        base.stage.token_ids(texts)
        tok_s = time.perf_counter() - t0
        for policy in POLICIES if run % 2 == 0 else POLICIES[::-1]:
            enc = base.with_long_text(policy)  # type: ignore[arg-type]
            pieces = enc.split(texts)
            windows[policy] = len(pieces) / len(texts)
            tokens[policy] = sum(p.tokens for p in pieces) / len(texts)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            enc.encode(texts)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            rows[policy]["s"].append(time.perf_counter() - t0)
            rows[policy]["tok_s"].append(tok_s)
    scale = REFERENCE / args.n
    chunk = statistics.median(rows["chunk_mean"]["s"]) * scale
    dev = torch.cuda.get_device_name() if args.device.startswith("cuda") else (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores")  # fmt: skip
    print(f"\n**Reference step: {REFERENCE} completions x ~{args.tokens} word pieces** on {dev} "
          f"({args.device}, compile {base.compile_state}); measured on {args.n} fresh completions "
          f"a policy, median of {args.runs}, scaled x{scale:g}; load "
          f"{os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| policy | windows / completion | tokens / step | seconds / step | x chunk_mean | "
          "of which tokenising (s) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for p in POLICIES:
        s = statistics.median(rows[p]["s"]) * scale
        tok_step = statistics.median(rows[p]["tok_s"]) * scale
        print(f"| {p} | {windows[p]:.2f} | {tokens[p] * REFERENCE / 1e6:.2f}M | {s:.1f} | "
              f"{s / chunk:.2f}x | {tok_step:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
