"""The same workload through Ray Serve's proxy, through a DeploymentHandle and through plain
`reweighter serve`, side by side in one run: throughput, p50/p95 latency, and what the proxy
costs per request.

Plain: a `reweighter serve` child (reweighter.launch). Serve: a local Ray node with `--cpus`
CPUs, the application built by reweighter.deploy.ray.build with 1 replica, then 2 (a shared
Redis: the machine's at 127.0.0.1:6379 or a private one), called over HTTP through Serve's
proxy (the same aiohttp client as plain) and through `connect("ray://reweighter")`.

Two workloads, `--requests` requests at `--concurrency` at once, each one group of `--group`
completions of `--words` words: *cached* (one group repeated: everything but the encoder, so
the difference to plain is the path's own cost per request) and *fresh* (new texts each
request: the encoder's work, what scaling replicas could add). Each cell is the median of
`--rounds` rounds, the contenders interleaved within a round.

    .venv/bin/python bench/bench_ray_serve.py                 # ~5 min on 2 cores
    .venv/bin/python bench/bench_ray_serve.py --quick
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
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"
NONCE = f"{os.getpid()}{time.time_ns() % 10**9}"
WORDS = ["first", "we", "compute", "the", "product", "then", "carry", "digit", "so", "partial",
         "sum", "becomes", "checking", "again", "remainder", "is", "small", "hence", "total",
         "equals", "therefore", "it", "answer", "seven", "twelve", "divide", "both",
         "sides"]  # fmt: skip


class Texts:
    def __init__(self, words: int, seed: int = 0) -> None:
        self.words, self.rng, self.n = words, random.Random(seed), itertools.count()

    def one(self) -> str:
        # the run's nonce: a rerun's texts are new to the replicas' Redis embedding cache too
        return f"Attempt {NONCE}-{next(self.n)}. " + " ".join(self.rng.choices(WORDS, k=self.words))


def _redis_url() -> tuple[str, subprocess.Popen | None]:
    import redis

    from reweighter.service import free_port

    url = "redis://127.0.0.1:6379/0"
    try:
        if redis.Redis.from_url(url, socket_timeout=0.5).ping():
            return url, None
    except Exception:
        pass
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly",
                             "no"], stdout=subprocess.DEVNULL)  # fmt: skip
    time.sleep(0.5)
    return f"redis://127.0.0.1:{port}/0", proc


async def _run(
    call: Callable[[Any], Awaitable[Any]], requests: list[Any], concurrency: int
) -> dict[str, float]:
    lat: list[float] = []
    queue = list(requests)

    async def worker() -> None:
        while queue:
            req = queue.pop()
            t = time.perf_counter()
            await call(req)
            lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    lat.sort()
    return {
        "req_s": len(requests) / wall,
        "p50_ms": 1e3 * lat[len(lat) // 2],
        "p95_ms": 1e3 * lat[min(len(lat) - 1, int(0.95 * len(lat)))],
    }


def _requests(kind: str, texts: Texts, n: int, group: int) -> list[Any]:
    from reweighter.types import Group, ReweightRequest

    rewards = [float(i % 2) for i in range(group)]

    def one() -> Any:
        return ReweightRequest(groups=[Group(rewards, [texts.one() for _ in range(group)])])

    if kind == "cached":
        return [one()] * n
    return [one() for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--words", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpus", type=float, default=2)
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.rounds, args.replicas = 24, 1, "1"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import ray
    from ray import serve

    from reweighter.client import AsyncReweighterClient
    from reweighter.client.ray import AsyncRayReweighterClient
    from reweighter.deploy.ray import build
    from reweighter.launch import serve as launch_serve
    from reweighter.service import free_port

    redis_url, redis_proc = _redis_url()
    texts = Texts(args.words)
    load0 = os.getloadavg()
    results: dict[str, Any] = {
        "args": vars(args),
        "machine": platform.processor() or platform.machine(),
    }
    http_port = free_port()
    plain = launch_serve(settings={"device": "cpu", "compile": "off"})
    ray.init(num_cpus=args.cpus, include_dashboard=False, object_store_memory=100 * 2**20,
             log_to_driver=False)  # fmt: skip
    serve.start(http_options={"host": "127.0.0.1", "port": http_port})
    proxy_url = f"http://127.0.0.1:{http_port}"
    rows = []
    try:
        for replicas in [int(r) for r in args.replicas.split(",")]:
            per = max(0.1, min(1.0, (args.cpus - 0.2) / replicas))
            app = build({
                "settings": {"redis_url": redis_url, "device": "cpu", "compile": "off",
                             "assembly_prefix": f"bench-ray-{os.getpid()}:"},
                "deployment": {"num_replicas": replicas, "ray_actor_options": {
                    "num_cpus": per, "runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1"}}}},
            })  # fmt: skip
            t = time.perf_counter()
            serve.run(app, name="reweighter", route_prefix="/")
            print(f"{replicas} replica(s) ready in {time.perf_counter() - t:.0f} s", flush=True)

            async def cells(replicas: int = replicas) -> None:
                http = AsyncReweighterClient(plain.url)
                via_proxy = AsyncReweighterClient(proxy_url)
                handle = AsyncRayReweighterClient("reweighter")  # connect("ray://reweighter")
                contenders = {
                    "plain `reweighter serve` (HTTP)": http.reweight,
                    "Serve proxy (HTTP)": via_proxy.reweight,
                    "Serve handle (`ray://`)": handle.reweight,
                }
                for kind in ("cached", "fresh"):
                    warm = _requests(kind, texts, args.concurrency, args.group)
                    for call in contenders.values():
                        await _run(call, warm, args.concurrency)
                    got: dict[str, list[dict[str, float]]] = {k: [] for k in contenders}
                    for _ in range(args.rounds):
                        for name, call in contenders.items():
                            reqs = _requests(kind, texts, args.requests, args.group)
                            got[name].append(await _run(call, reqs, args.concurrency))
                    for name, runs in got.items():
                        if replicas > 1 and name.startswith("plain"):
                            continue  # plain is one process whatever Serve runs
                        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                        rows.append({"replicas": replicas, "workload": kind, "path": name,
                                     "texts_s": med["req_s"] * args.group, **med})  # fmt: skip
                        print(rows[-1], flush=True)
                await http.close()
                await via_proxy.close()
                await handle.close()

            asyncio.run(cells())
    finally:
        serve.shutdown()
        ray.shutdown()
        plain.stop()
        if redis_proc is not None:
            redis_proc.kill()
    load1 = os.getloadavg()
    base = {r["workload"]: r for r in rows if r["path"].startswith("plain")}
    print(f"\nload average {load0[0]:.1f} -> {load1[0]:.1f} on {os.cpu_count()} CPUs; "
          f"group {args.group} x {args.words} words, {args.requests} requests at "
          f"{args.concurrency} at once, median of {args.rounds}\n")  # fmt: skip
    print("| replicas | workload | path | texts/s | x plain | p50 / p95 ms | p50 - plain's ms |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for r in rows:
        b = base[r["workload"]]
        print(f"| {r['replicas']} | {r['workload']} | {r['path']} | {r['texts_s']:.1f} | "
              f"{r['req_s'] / b['req_s']:.2f}x | {r['p50_ms']:.1f} / {r['p95_ms']:.1f} | "
              f"{r['p50_ms'] - b['p50_ms']:+.1f} |")  # fmt: skip
    results.update(rows=rows, load=[load0[0], load1[0]])
    OUT.mkdir(exist_ok=True)
    (OUT / "ray_serve.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
