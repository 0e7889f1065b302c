"""Benchmark: /v1/reweight latency rows and how the service scales (issue 15, items 4 and 6).

Outside-in: `reweighter serve` as a child process (compiled encoder in before the clock
starts, the state the default reaches once its background compile is warm), asyncio clients on
loopback. Bounded: each point sends a handful of requests, so the whole run takes minutes.

  latency   G=8, concurrency 1, HTTP and gRPC: cached (one repeated group: everything but the
            encoder) and uncached (fresh ~180-piece completions), p50 / p99
  group     throughput and p99 vs group size G = 4 ... 64 (~180-piece completions, 1 client)
  length    vs completion length 64 ... 4096 word pieces (G = 8, 1 client)
  clients   vs concurrent clients 1 ... 64 (G = 8, ~180 pieces)

    .venv/bin/python bench/bench_scaling.py               # all (about 5-10 min on 2 cores)
    .venv/bin/python bench/bench_scaling.py --only latency

Prints markdown tables and writes bench/out/scaling_{group,length,clients}.png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib

from bench_first_contact import Served  # noqa: E402
from bench_service import Texts, _pct, _request  # noqa: E402
from roofline import FlopModel, peak_gflops  # noqa: E402

from reweighter.client import AsyncGrpcReweighterClient, AsyncReweighterClient  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


async def _timed(client, groups: list[list[str]], conc: int) -> tuple[float, list[float]]:
    sem = asyncio.Semaphore(conc)
    lat: list[float] = []

    async def one(texts: list[str]) -> None:
        async with sem:
            t = time.perf_counter()
            out = await client.reweight(_request(texts))
            lat.append((time.perf_counter() - t) * 1e3)
            assert len(out.groups[0].rewards) == len(texts)

    t = time.perf_counter()
    await asyncio.gather(*(one(g) for g in groups))
    return time.perf_counter() - t, lat


async def latency_rows(svc: Served, grpc: str, args: argparse.Namespace) -> list[str]:
    texts = Texts(180, seed=21)
    rows = []
    async with AsyncReweighterClient(svc.url) as http, AsyncGrpcReweighterClient(grpc) as rpc:
        repeated = texts.group(8)
        for client in (http, rpc):
            await _timed(client, [repeated, texts.group(8)], 1)  # warm both paths
        for name, client in (("HTTP", http), ("gRPC", rpc)):
            _, cached = await _timed(client, [repeated] * args.cached_n, 1)
            _, fresh = await _timed(client, [texts.group(8) for _ in range(args.fresh_n)], 1)
            for kind, lat in (("cached", cached), ("uncached", fresh)):
                rows.append(f"| {name} | {kind} | {len(lat)} | {_pct(lat, 0.5):.1f} "
                            f"| {_pct(lat, 0.99):.1f} |")  # fmt: skip
    return rows


FLOPS = FlopModel(6, 384, 1536)  # all-MiniLM-L6-v2 (the default model)


def completion_flops(tokens: int, window: int = 254) -> float:
    """FLOPs of one completion under chunk_mean: equal windows of <= 254 pieces plus 2."""
    k = max(1, -(-tokens // window))
    return k * FLOPS.sequence(tokens / k + 2)


async def sweep(svc: Served, kind: str, args: argparse.Namespace) -> list[dict]:
    points = {
        "group": [4, 8, 16, 32, 64],
        "length": [64, 256, 1024, 4096],
        "clients": [1, 4, 16, 64],
    }[kind]
    out = []
    async with AsyncReweighterClient(svc.url, timeout=600) as http:
        for x in points:
            g = x if kind == "group" else 8
            tokens = x if kind == "length" else 180
            conc = x if kind == "clients" else 1
            n = max(args.requests, conc)
            # A seed per (sweep, point): the same seed in two sweeps (group=16 and clients=16)
            # regenerates the same texts, which the service then answers from its cache.
            seed = {"group": 1000, "length": 2000, "clients": 3000}[kind] + x
            texts = Texts(tokens, seed=seed)
            groups = [texts.group(g) for _ in range(n)]  # built before the clock starts
            wall, lat = await _timed(http, groups, conc)
            row = {"x": x, "n": n, "groups_s": n / wall, "completions_s": n * g / wall,
                   "gflops": n * g * completion_flops(tokens) / wall / 1e9,
                   "tokens_s": n * g * tokens / wall, "p50": _pct(lat, 0.5),
                   "p99": _pct(lat, 0.99)}  # fmt: skip
            out.append(row)
            print(f"  {kind}={x}: {row['completions_s']:.1f} completions/s, "
                  f"p99 {row['p99']:.0f} ms", file=sys.stderr)  # fmt: skip
    return out


def _plot(kind: str, rows: list[dict], label: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [r["x"] for r in rows]
    ax.plot(xs, [r["tokens_s"] for r in rows], "o-", color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)  # a flat line must look flat
    ax.set_xlabel(label)
    ax.set_ylabel("completion tokens/s", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(xs, [r["p99"] / 1e3 for r in rows], "s--", color="tab:red")
    ax2.set_yscale("log")
    ax2.set_ylabel("p99 latency (s)", color="tab:red")
    ax.set_title(f"/v1/reweight vs {label} ({os.cpu_count()} CPU cores)")
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"scaling_{kind}.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["latency", "group", "length", "clients"], action="append")
    ap.add_argument("--requests", type=int, default=4, help="requests per sweep point (min)")
    ap.add_argument("--cached-n", type=int, default=100)
    ap.add_argument("--fresh-n", type=int, default=12)
    ap.add_argument("--compile", default="on", choices=["auto", "on", "off"])
    args = ap.parse_args()
    parts = args.only or ["latency", "group", "length", "clients"]
    load0 = os.getloadavg()[0]
    peak = peak_gflops()
    svc = Served({"REWEIGHTER_COMPILE": args.compile, "REWEIGHTER_LOG_LEVEL": "info"})
    grpc = f"127.0.0.1:{svc.grpc_port}"
    labels = {"group": "group size G", "length": "completion length (word pieces)",
              "clients": "concurrent clients"}  # fmt: skip
    try:
        if "latency" in parts:
            rows = asyncio.run(latency_rows(svc, grpc, args))
            print("\n### /v1/reweight latency, G = 8, concurrency 1\n")
            print("| transport | texts | requests | p50 ms | p99 ms |")
            print("|---|---|---:|---:|---:|")
            print("\n".join(rows))
        for kind in [p for p in parts if p != "latency"]:
            rows = asyncio.run(sweep(svc, kind, args))
            print(f"\n### Scaling with {labels[kind]} (HTTP, fresh texts)\n")
            print(f"| {labels[kind]} | requests | groups/s | completions/s | tokens/s "
                  f"| p50 ms | p99 ms | useful GFLOP/s | % of {peak:.0f} GFLOP/s |")  # fmt: skip
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in rows:
                print(f"| {r['x']} | {r['n']} | {r['groups_s']:.2f} | {r['completions_s']:.1f} "
                      f"| {r['tokens_s']:,.0f} | {r['p50']:.0f} | {r['p99']:.0f} "
                      f"| {r['gflops']:.1f} | {100 * r['gflops'] / peak:.0f} % |")  # fmt: skip
            print(f"\nplot: {_plot(kind, rows, labels[kind])}")
    finally:
        svc.close()
    print(f"\nsgemm peak {peak:.0f} GFLOP/s (measured before the server started)")
    print(f"\nload average (1 min) {load0:.2f} -> {os.getloadavg()[0]:.2f}; compiled encoder "
          f"in: {svc.compiled_at is not None}; recompiles refused: {len(svc.fallback_lines)}")


if __name__ == "__main__":
    main()
