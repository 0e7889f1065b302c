"""Benchmark 3: the batched methods vs a per-group Python loop (B groups x G completions).

Times cosine similarity, then DRA and MMR from precomputed similarities and from embeddings
(similarity included), darling from embeddings (similarity and class components included),
pass_at_k (k = 4) and outcome_ucb's bonus (from given counts; its memory round trip is
bench/bench_memory.py), on CPU and on CUDA when there is one. Median of several runs after
warm-up; the loop baseline is measured in the same run. Prints a markdown table.
Target (issue 6): 1024 groups x G=16 under 10 ms on CPU.

Then the `engine:` rows: every catalogue method (and `pass_at_k` with method none) as a
request costs the engine from embeddings, with no transport: `ReweightEngine.reweight` on B
groups of G precomputed vectors (numpy arrays) and answers, the request checks, similarities,
stats, the method and GRPO advantages included (outcome_ucb: its in-process memory, a new step
per run; the Redis round trip is bench/bench_memory.py). No loop baseline for these rows.

    .venv/bin/python bench/bench_methods.py            # full grid
    .venv/bin/python bench/bench_methods.py --quick    # a short run
    .venv/bin/python bench/bench_methods.py --groups 4 --group-size 4 --runs 1   # a smoke run
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
    darling,
    dra,
    mmr,
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
    ap.add_argument("--groups", type=int, action="append", help="B (repeatable; default grid)")
    ap.add_argument("--group-size", type=int, action="append", help="G (repeatable)")
    ap.add_argument("--runs", type=int, default=0, help="timed runs per row (default 21; 5 quick)")
    ap.add_argument("--no-engine", action="store_true", help="skip the engine: rows")
    args = ap.parse_args()

    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    sizes_b = args.groups or ([64, 1024] if args.quick else [64, 256, 1024])
    sizes_g = args.group_size or ([16] if args.quick else [8, 16])
    runs, loop_runs, warmup = (5, 2, 2) if args.quick else (21, 5, 5)
    if args.runs:
        runs, loop_runs, warmup = args.runs, min(loop_runs, args.runs), min(warmup, args.runs)

    if args.threads:
        torch.set_num_threads(args.threads)

    def per_group(fn: Callable) -> Callable:
        return lambda *xs: [fn(*(x[i] for x in xs)) for i in range(len(xs[0]))]

    # (name, batched fn, per-group loop, input): "sim" rows start from precomputed similarities
    # (the engine computes them once, for the stats and the method), "emb" rows from embeddings.
    def darling_emb(r: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return darling(r, sim=cosine_similarity(e))

    def dra_sim(r: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return dra(r, sim=s)

    def mmr_sim(r: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return mmr(r, sim=s)

    def pass_at_4(r: torch.Tensor) -> torch.Tensor:
        return pass_at_k(r, 4)

    methods: list[tuple[str, Callable, Callable, str]] = [
        ("similarity", lambda e: cosine_similarity(e), per_group(cosine_similarity), "e"),
        ("dra (sim)", dra_sim, per_group(dra_sim), "rs"),
        ("mmr (sim)", mmr_sim, per_group(mmr_sim), "rs"),
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
                    if not args.no_engine:
                        _engine_rows(dev_name, r, e, runs, warmup)
    if "cpu" in devices and 1024 in sizes_b and 16 in sizes_g:
        verdict = "missed: " + ", ".join(missed) if missed else "met"
        print(
            f"\nTarget 1024 groups x G=16 < {TARGET_MS:.0f} ms on CPU, from embeddings: {verdict}"
        )
    print(f"Load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def _engine_rows(dev_name: str, r: torch.Tensor, e: torch.Tensor, runs: int, warmup: int) -> None:
    """One row per catalogue method (and pass_at_k): `ReweightEngine.reweight` from embeddings,
    GRPO advantages (pass_at_k: k = min(4, G)), answers given (outcome_ucb needs them; darling
    then takes them as its classes, as a request with answers does)."""
    import numpy as np

    from reweighter.config import Settings
    from reweighter.engine import ReweightEngine
    from reweighter.methods.catalog import method_names
    from reweighter.types import Group, ReweightRequest

    b, g = r.shape
    # The default request limits (8192 completions) would refuse 1024 x 16: raised for the bench.
    limits = {"max_groups": max(1024, b), "max_completions": max(8192, b * g)}
    eng = ReweightEngine(Settings(redis_url=None, **limits), method_device=dev_name)
    rewards = r.cpu().tolist()
    vectors = [np.ascontiguousarray(x, dtype=np.float32) for x in e.cpu().numpy()]
    gen = torch.Generator().manual_seed(b + g)
    answers = torch.randint(0, 4, (b, g), generator=gen).tolist()
    groups = [
        Group(rewards=rewards[i], embeddings=vectors[i], answers=[str(a) for a in answers[i]],
              prompt_key=f"bench-prompt-{i}")
        for i in range(b)
    ]  # fmt: skip
    step = iter(range(10**9))
    cases = [(m, "grpo", {}) for m in method_names()]
    cases.append(("none", "pass_at_k", {"k": min(4, g)}))
    try:
        for method, adv, adv_params in cases:
            label = f"engine: {method}" if adv != "pass_at_k" else "engine: pass_at_k k=4"

            def one(method: str = method, adv: str = adv, adv_params: dict = adv_params) -> None:
                eng.reweight(ReweightRequest(groups, method, {}, adv, adv_params, step=next(step)))

            t = _time(one, torch.device(dev_name), runs, warmup)
            print(f"| {label} | {dev_name} | {b} | {g} | {t:.2f} | - | - |", flush=True)
    finally:
        eng.close()


if __name__ == "__main__":
    main()
