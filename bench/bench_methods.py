"""Benchmark 3: the batched methods vs a per-group Python loop (B groups x G completions).

Times cosine similarity, then DRA and MMR from precomputed similarities and from embeddings
(similarity included), darling from embeddings (similarity and class components included),
pass_at_k (k = 4) and outcome_ucb's bonus (from given counts; its memory round trip is
bench/bench_memory.py), on CPU and on CUDA when there is one. Median of several runs after
warm-up; the loop baseline is measured in the same run. Prints a markdown table.
Target (issue 6): 1024 groups x G=16 under 10 ms on CPU.

    .venv/bin/python bench/bench_methods.py            # full grid
    .venv/bin/python bench/bench_methods.py --quick    # a short run
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch

from reweighter.methods import (
    cosine_similarity,
    darling_from_similarity,
    dra,
    dra_from_similarity,
    mmr,
    mmr_from_similarity,
    outcome_ucb,
    pass_at_k,
)

TARGET_MS = 10.0


def _time(fn: Callable[[], object], device: torch.device, runs: int, warmup: int) -> float:
    """Median wall time of `fn` in ms."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _inputs(b: int, g: int, d: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(b * 100 + g)
    rewards = (torch.rand(b, g, generator=gen) > 0.5).float()  # binary correctness rewards
    # Clustered embeddings, as a collapsing policy gives: a few paths plus noise.
    centres = torch.randn(b, 3, d, generator=gen)
    which = torch.randint(0, 3, (b, g), generator=gen)
    emb = centres.gather(1, which.unsqueeze(-1).expand(b, g, d))
    emb = emb + 0.3 * torch.randn(b, g, d, generator=gen)
    return rewards.to(device), emb.to(device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and runs")
    ap.add_argument("--dim", type=int, default=384, help="embedding size (MiniLM: 384)")
    ap.add_argument("--device", action="append", help="cpu / cuda (default: both if present)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's)")
    args = ap.parse_args()

    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    sizes_b = [64, 1024] if args.quick else [64, 256, 1024]
    sizes_g = [16] if args.quick else [8, 16]
    runs, loop_runs, warmup = (5, 2, 2) if args.quick else (21, 5, 5)

    if args.threads:
        torch.set_num_threads(args.threads)

    def per_group(fn: Callable) -> Callable:
        return lambda *xs: [fn(*(x[i] for x in xs)) for i in range(len(xs[0]))]

    # (name, batched fn, per-group loop, input): "sim" rows start from precomputed similarities
    # (the engine computes them once, for the stats and the method), "emb" rows from embeddings.
    def darling_emb(r: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return darling_from_similarity(r, cosine_similarity(e))

    def pass_at_4(r: torch.Tensor) -> torch.Tensor:
        return pass_at_k(r, 4)

    methods: list[tuple[str, Callable, Callable, str]] = [
        ("similarity", lambda e: cosine_similarity(e), per_group(cosine_similarity), "e"),
        ("dra (sim)", dra_from_similarity, per_group(dra_from_similarity), "rs"),
        ("mmr (sim)", mmr_from_similarity, per_group(mmr_from_similarity), "rs"),
        ("dra (emb)", dra, per_group(dra), "re"),
        ("mmr (emb)", mmr, per_group(mmr), "re"),
        ("darling (emb)", darling_emb, per_group(darling_emb), "re"),
        ("pass_at_k k=4", pass_at_4, per_group(pass_at_4), "r"),
        ("outcome_ucb (counts)", outcome_ucb, per_group(outcome_ucb), "rc"),
    ]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, D={args.dim}")
    if torch.cuda.is_available():
        print(f"CUDA: {torch.cuda.get_device_name()}")
    print()
    print("| method | device | B | G | batched ms | per-group loop ms | speed-up |")
    print("|---|---|---:|---:|---:|---:|---:|")
    missed = []
    with torch.inference_mode():
        for dev_name in devices:
            device = torch.device(dev_name)
            for g in sizes_g:
                for b in sizes_b:
                    r, e = _inputs(b, g, args.dim, device)
                    counts = torch.randint(
                        -1, 20, r.shape, generator=torch.Generator().manual_seed(b)
                    )
                    inputs = {"r": r, "e": e, "s": cosine_similarity(e), "c": counts.to(device)}
                    for name, batched, loop, which in methods:
                        xs = [inputs[k] for k in which]
                        t_b = _time(partial(batched, *xs), device, runs, warmup)
                        t_l = _time(partial(loop, *xs), device, loop_runs, 1)
                        print(
                            f"| {name} | {dev_name} | {b} | {g} | {t_b:.2f} | {t_l:.1f} "
                            f"| {t_l / t_b:.0f}x |",
                            flush=True,
                        )
                        target_row = dev_name == "cpu" and (b, g) == (1024, 16)
                        if target_row and "emb" in name and t_b >= TARGET_MS:
                            missed.append(f"{name} {t_b:.2f} ms")
    if "cpu" in devices and 1024 in sizes_b and 16 in sizes_g:
        verdict = "missed: " + ", ".join(missed) if missed else "met"
        print(
            f"\nTarget 1024 groups x G=16 < {TARGET_MS:.0f} ms on CPU, from embeddings: {verdict}"
        )
    print(f"Load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
