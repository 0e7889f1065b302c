"""Benchmark: outcome_ucb's memory round trip (reweighter.memory), Redis vs in process.

One call is what the engine does per request: `observe_many` for B groups of G answers (each
group a prompt key at a new step: read the earlier steps, record this one). Steps advance per
call and the prompt keys cycle through an "epoch" of calls / 8 calls, so each key comes back
8 times and ends with 8 recorded steps, as a dataset seen for 8 epochs does. Prints p50/p99 per
store and B, the in-process store measured in the same run as the baseline. Redis: the URL
given (default the machine's 127.0.0.1:6379) under a unique key prefix, deleted at the end.

    .venv/bin/python bench/bench_memory.py [--redis redis://127.0.0.1:6379/0] [--calls 300]
    .venv/bin/python bench/bench_memory.py --groups 1 --groups 4 --calls 20   # a smoke run
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid

from reweighter.memory import InProcessMemory
from reweighter.memory.redis_store import RedisMemory


def run(store: object, b: int, g: int, calls: int, tag: str) -> list[float]:
    rnd = random.Random(b * 7 + g)
    times = []
    epoch = max(1, calls // 8)
    for step in range(calls):
        first = (step % epoch) * b
        items = [
            (f"{tag}:prompt-{first + i}", step, [str(rnd.randint(0, 9)) for _ in range(g)])
            for i in range(b)
        ]
        t0 = time.perf_counter()
        store.observe_many(items)  # type: ignore[attr-defined]
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--g", type=int, default=16)
    ap.add_argument("--groups", type=int, action="append", help="B per call (default 1, 64, 1024)")
    args = ap.parse_args()
    prefix = f"bench:mem:{uuid.uuid4().hex}:"
    redis_store = RedisMemory(args.redis, ttl_s=3600, max_keys=1_000_000, prefix=prefix)
    print(f"{args.calls} calls per row, G = {args.g}; Redis {args.redis} (prefix {prefix})\n")
    print("| store | groups per call | p50 ms | p99 ms | p50 per group µs |")
    print("|---|---:|---:|---:|---:|")
    try:
        for b in args.groups or (1, 64, 1024):
            calls = args.calls if b < 1024 else max(16, args.calls // 10)
            for name, store in (
                ("in process", InProcessMemory(3600, 1_000_000)),
                ("redis", redis_store),
            ):
                t = run(store, b, args.g, calls, f"{name}-{b}")
                p50, p99 = pct(t, 50), pct(t, 99)
                print(f"| {name} | {b} | {p50:.3f} | {p99:.3f} | {1e3 * p50 / b:.1f} |", flush=True)
    finally:
        import redis

        r = redis.Redis.from_url(args.redis)
        keys = list(r.scan_iter(match=prefix + "*", count=10_000))
        for i in range(0, len(keys), 1000):
            r.delete(*keys[i : i + 1000])
        r.close()
        redis_store.close()
    print(f"\nLoad average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
