"""Issue 38: a light tenant's latency alone and while another tenant floods (outside in).

Starts `reweighter serve` as documented (docs/operations.md, "One pool for many jobs"): with a
tenants file of two tenants (light, flood) by default, or with `--open` as a service without
tenants (what main did before issue 38: both jobs are one to it). The light job sends one group
of 8 short fresh completions at a time (/v1/reweight, dra) and measures each request's latency;
the flood job keeps `--flood` requests of 32 fresh ~100-word completions in flight. Prints a
markdown row per phase (light alone; the flood alone; the light job under the flood) with the
light job's p50/p95, the flood's throughput (texts the encoder ran per second, from the
server's metrics, the light job's own texts taken out) and the load average, which matters
here: the machine is shared with other agents.

    .venv/bin/python bench/bench_tenants.py              # tenants file (after)
    .venv/bin/python bench/bench_tenants.py --open       # no tenants (before: main's service)
    .venv/bin/python bench/bench_tenants.py --threads 1  # torch on one thread (a shared machine)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from reweighter.client import AsyncReweighterClient, RetryPolicy
from reweighter.launch import serve
from reweighter.types import Group, ReweightRequest

KEYS = {"light": "bench-light-key-1", "flood": "bench-flood-key-2"}
_WORDS = ["we", "add", "the", "digits", "carry", "one", "so", "the", "sum", "is", "then",
          "check", "again", "hence", "total", "equals"]  # fmt: skip
_count = itertools.count()


def text(words: int) -> str:
    n = next(_count)
    body = " ".join(_WORDS[(n * 7 + i * 3) % len(_WORDS)] for i in range(words))
    return f"attempt {n}: {body}"


def light_request() -> ReweightRequest:
    return ReweightRequest(
        groups=[Group([float(i % 2) for i in range(8)], [text(12) for _ in range(8)])],
        method="dra",
    )


def flood_request() -> ReweightRequest:
    return ReweightRequest(
        groups=[Group([float(i % 2) for i in range(32)], [text(100) for _ in range(32)])],
        method="dra",
    )


async def light(url: str, key: str | None, n: int) -> list[float]:
    out = []
    async with AsyncReweighterClient(url, api_key=key, retry=RetryPolicy(retries=0)) as c:
        await c.reweight(light_request())  # warm the connection
        for _ in range(n):
            start = time.perf_counter()
            await c.reweight(light_request())
            out.append(time.perf_counter() - start)
    return out


async def flood(url: str, key: str | None, concurrency: int, stop: asyncio.Event) -> int:
    done = 0
    retry = RetryPolicy(retries=0)

    async def one() -> None:
        nonlocal done
        async with AsyncReweighterClient(url, api_key=key, retry=retry, timeout=300) as c:
            while not stop.is_set():
                try:
                    await c.reweight(flood_request())
                    done += 1
                except Exception:  # a 429 under its bound: keep flooding
                    await asyncio.sleep(0.05)

    await asyncio.gather(*(one() for _ in range(concurrency)))
    return done


def q(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p * (len(s) - 1)))]


def encoded(url: str) -> float:
    """Pieces the server's encoder has run so far (`reweighter_encoder_batch_size_sum`: counted
    per forward pass, so a window's difference is smooth, unlike whole requests)."""
    import httpx

    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("reweighter_encoder_batch_size_sum"):
            return float(line.split()[1])
    raise RuntimeError("reweighter_encoder_batch_size_sum not exported")


async def run(
    url: str, keys: dict[str, str | None], n: int, concurrency: int, alone_s: float
) -> list[dict]:
    """Light alone; then the flood starts: the flood alone for `alone_s` seconds (its
    throughput as the only tenant), then the light job beside it (the light job's latency and
    the flood's throughput meanwhile)."""
    rows = []
    load = os.getloadavg()[0]
    alone = await light(url, keys["light"], n)
    rows.append({"phase": "alone", "p50": statistics.median(alone), "p95": q(alone, 0.95),
                 "n": n, "load1": load})  # fmt: skip
    stop = asyncio.Event()
    flooding = asyncio.create_task(flood(url, keys["flood"], concurrency, stop))
    await asyncio.sleep(3.0)  # the flood's queue builds up
    if alone_s > 0:
        load, before, t0 = os.getloadavg()[0], await asyncio.to_thread(encoded, url), time.time()
        await asyncio.sleep(alone_s)
        after, t1 = await asyncio.to_thread(encoded, url), time.time()
        rows.append({"phase": f"flood x{concurrency} alone", "flood_texts_s":
                     (after - before) / (t1 - t0), "load1": load})  # fmt: skip
    load, before, t0 = os.getloadavg()[0], await asyncio.to_thread(encoded, url), time.time()
    under = await light(url, keys["light"], n)
    after, t1 = await asyncio.to_thread(encoded, url), time.time()
    stop.set()
    served = await flooding
    light_texts = 8 * (n + 1)  # its requests (and the one that warms the connection)
    rows.append({"phase": f"flood x{concurrency}", "p50": statistics.median(under),
                 "p95": q(under, 0.95), "n": n, "load1": load, "flood_requests": served,
                 "flood_texts_s": (after - before - light_texts) / (t1 - t0),
                 "latencies": under})  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--open", action="store_true", help="no tenants file (main before 38)")
    ap.add_argument("--n", type=int, default=40, help="light requests per phase")
    ap.add_argument("--flood", type=int, default=12, help="flood requests in flight")
    ap.add_argument("--alone-s", type=float, default=15.0,
                    help="seconds the flood's throughput is measured alone (0: not)")  # fmt: skip
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP_NUM_THREADS / MKL_NUM_THREADS for the service (default: torch's, "
                    "every core): on a machine whose cores other work shares, the cores the "
                    "service really gets")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--metrics", action="store_true", help="print the server's time sums")
    args = ap.parse_args()
    flags: list[str] = []
    keys: dict[str, str | None] = {"light": None, "flood": None}
    if not args.open:
        d = tempfile.mkdtemp(prefix="bench-tenants-")
        path = Path(d) / "tenants.json"
        path.write_text(json.dumps({"tenants": [
            {"name": name, "key": key} for name, key in KEYS.items()
        ]}))  # fmt: skip
        flags = ["--tenants", str(path)]
        keys = dict(KEYS)
    if args.threads:  # the serve child inherits them
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    with serve(*flags) as served:
        rows = asyncio.run(run(served.url, keys, args.n, args.flood, args.alone_s))
        if args.metrics:
            import httpx

            text = httpx.get(f"{served.url}/metrics").text
            for line in text.splitlines():
                if line.startswith(("reweighter_queue_duration_seconds_sum",
                                    "reweighter_queue_duration_seconds_count",
                                    "reweighter_encode_duration_seconds_sum",
                                    "reweighter_encode_duration_seconds_count",
                                    "reweighter_tenant_request_duration_seconds_sum",
                                    "reweighter_tenant_request_duration_seconds_count",
                                    "reweighter_encoder_batch_size_sum",
                                    "reweighter_encoder_batch_size_count")):  # fmt: skip
                    print(line)
    label = "open (no tenants)" if args.open else "tenants file"
    if args.threads:
        label += f", {args.threads} thread(s)"
    print("| service | phase | light p50 s | light p95 s | n | flood texts/s | load avg (1 min) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        lat = f"{r['p50']:.3f} | {r['p95']:.3f} | {r['n']}" if "p50" in r else "- | - | -"
        tput = f"{r['flood_texts_s']:.1f}" if "flood_texts_s" in r else "-"
        print(f"| {label} | {r['phase']} | {lat} | {tput} | {r['load1']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"service": label, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
