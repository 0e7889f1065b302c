"""Benchmark 3: the batched methods vs a per-group Python loop (B groups x G completions).

Times DRA and MMR from embeddings (cosine similarity included, as the engine runs them) on CPU,
and on CUDA when there is one. Median of several runs after warm-up; the loop baseline is measured
in the same run. Prints a markdown table. Target (issue 6): 1024 groups x G=16 under 10 ms on CPU.

    .venv/bin/python bench/bench_methods.py            # full grid
    .venv/bin/python bench/bench_methods.py --quick    # a short run
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch

from reweighter.methods import cosine_similarity, dra, mmr

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
    args = ap.parse_args()

    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    sizes_b = [64, 1024] if args.quick else [64, 256, 1024]
    sizes_g = [16] if args.quick else [8, 16]
    runs, loop_runs, warmup = (5, 2, 2) if args.quick else (21, 5, 5)

    methods: dict[str, tuple[Callable, Callable]] = {
        "similarity": (
            lambda r, e: cosine_similarity(e),
            lambda r, e: [cosine_similarity(e[i]) for i in range(len(e))],
        ),
        "dra": (lambda r, e: dra(r, e), lambda r, e: [dra(r[i], e[i]) for i in range(len(r))]),
        "mmr": (lambda r, e: mmr(r, e), lambda r, e: [mmr(r[i], e[i]) for i in range(len(r))]),
    }
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
                    for name, (batched, loop) in methods.items():
                        t_b = _time(partial(batched, r, e), device, runs, warmup)
                        t_l = _time(partial(loop, r, e), device, loop_runs, 1)
                        print(
                            f"| {name} | {dev_name} | {b} | {g} | {t_b:.2f} | {t_l:.1f} "
                            f"| {t_l / t_b:.0f}x |",
                            flush=True,
                        )
                        target_row = dev_name == "cpu" and (b, g) == (1024, 16)
                        if target_row and name != "similarity" and t_b >= TARGET_MS:
                            missed.append(f"{name} {t_b:.2f} ms")
    if "cpu" in devices and 1024 in sizes_b and 16 in sizes_g:
        verdict = "missed: " + ", ".join(missed) if missed else "met"
        print(f"\nTarget 1024 groups x G=16 < {TARGET_MS:.0f} ms on CPU: {verdict}")


if __name__ == "__main__":
    main()
