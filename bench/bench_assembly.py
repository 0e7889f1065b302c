"""Benchmark: what group assembly costs per member, against /v1/reweight on the whole group.

Starts `reweighter serve` as a child process (in-process store, then Redis), and for each
transport sends groups of G=8 members with precomputed 384-d embeddings (so the encoder is out
of the picture and what is left is assembly: validation, the store, waiting, answering). Per
group, interleaved: one /v1/reweight call on the whole group, then the group's 8 members sent
concurrently with `submit_member` (each member's latency is send -> answer; the group completes
when its last member lands). A first row calls the engine and the assembler directly, in this
process, without any transport. Overhead per member = member latency - the group's /v1/reweight
latency, p50/p99 over the run; each cell is the median of several runs. Prints a markdown table;
writes bench/out/assembly.json.

    .venv/bin/python bench/bench_assembly.py            # 5 runs x 40 groups per cell
    .venv/bin/python bench/bench_assembly.py --quick    # 3 runs x 10 groups
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

from reweighter.client import AsyncGrpcReweighterClient, AsyncReweighterClient
from reweighter.launch import Served
from reweighter.types import Group, ReweightRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import _pct, start_service  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
G, DIM = 8, 384


def start_service_for(redis_url: str | None) -> Served:
    flags = ["--compile", "off"]  # no background compile competing for the CPU
    if redis_url:
        flags += ["--redis-url", redis_url, "--assembly-prefix", f"bench:asm:{uuid.uuid4().hex}:"]
    return start_service(*flags)


def _group(rng: random.Random) -> tuple[list[float], list[list[float]]]:
    return [float(rng.random() < 0.5) for _ in range(G)], [
        [rng.gauss(0, 1) for _ in range(DIM)] for _ in range(G)
    ]


async def _one_group(client, gid: str, rewards, vecs) -> tuple[float, list[float]]:
    """(/v1/reweight ms on the whole group, each member's submit_member ms)."""
    t0 = time.perf_counter()
    await client.reweight(ReweightRequest([Group(rewards, embeddings=vecs)], advantages="grpo"))
    whole = (time.perf_counter() - t0) * 1e3

    async def member(i: int) -> float:
        t = time.perf_counter()
        r = await client.submit_member(
            gid, f"{i:02d}", G, rewards[i], embedding=vecs[i], advantages="grpo", timeout_s=60
        )
        assert r.complete
        return (time.perf_counter() - t) * 1e3

    return whole, list(await asyncio.gather(*(member(i) for i in range(G))))


async def cell(client, groups: int, runs: int, seed: int) -> dict:
    rng = random.Random(seed)
    await _one_group(client, f"warm-{uuid.uuid4().hex}", *_group(rng))
    per_run = []
    for _ in range(runs):
        wholes, members, overheads = [], [], []
        for _ in range(groups):
            whole, lat = await _one_group(client, uuid.uuid4().hex, *_group(rng))
            wholes.append(whole)
            members += lat
            overheads += [x - whole for x in lat]
        per_run.append({
            "reweight_p50": _pct(wholes, 0.5), "reweight_p99": _pct(wholes, 0.99),
            "member_p50": _pct(members, 0.5), "member_p99": _pct(members, 0.99),
            "overhead_p50": _pct(overheads, 0.5), "overhead_p99": _pct(overheads, 0.99),
        })  # fmt: skip
    return {k: statistics.median(r[k] for r in per_run) for k in per_run[0]}


async def run_store(store: str, redis_url: str | None, args: argparse.Namespace) -> list[dict]:
    served = start_service_for(redis_url)
    rows = []
    try:
        async with (
            AsyncReweighterClient(served.url) as http,
            AsyncGrpcReweighterClient(served.target) as rpc,
        ):
            for name, client in (("HTTP", http), ("gRPC", rpc)):
                row = {"transport": name, "store": store,
                       **await cell(client, args.groups, args.runs, seed=len(rows))}  # fmt: skip
                rows.append(row)
                print(f"  {name:<5} {store:<10} member p50 {row['member_p50']:6.1f} ms "
                      f"p99 {row['member_p99']:6.1f}  /v1/reweight p50 {row['reweight_p50']:6.1f}"
                      f"  overhead p50 {row['overhead_p50']:6.1f} p99 {row['overhead_p99']:6.1f}",
                      file=sys.stderr)  # fmt: skip
    finally:
        served.close()
    return rows


class _InProcess:
    """The assembler and engine called directly (no transport): what assembly itself costs."""

    def __init__(self) -> None:
        from reweighter.assembly import GroupAssembler, make_store
        from reweighter.config import Settings
        from reweighter.engine import ReweightEngine

        settings = Settings(compile="off")
        self.engine = ReweightEngine(settings)
        self.engine.load()
        self.assembler = GroupAssembler(self.engine, make_store(settings), settings)

    async def reweight(self, request: ReweightRequest):
        return await self.engine.areweight(request)

    async def submit_member(self, gid, mid, size, reward, **kw):
        from reweighter.assembly import MemberSubmission

        return await self.assembler.submit(MemberSubmission(gid, mid, size, reward, **kw))


async def run_in_process(args: argparse.Namespace) -> list[dict]:
    client = _InProcess()
    try:
        row = {"transport": "none (in process)", "store": "in-process",
               **await cell(client, args.groups, args.runs, seed=99)}  # fmt: skip
    finally:
        await client.assembler.aclose()
    print(f"  in process: member p50 {row['member_p50']:6.1f} ms  /v1/reweight p50 "
          f"{row['reweight_p50']:6.1f}  overhead p50 {row['overhead_p50']:6.1f}",
          file=sys.stderr)  # fmt: skip
    return [row]


def table(rows: list[dict]) -> str:
    lines = [
        "| transport | store | member p50 / p99 (ms) | /v1/reweight, whole group p50 / p99 (ms)"
        " | overhead per member p50 / p99 (ms) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['transport']} | {r['store']} | {r['member_p50']:.1f} / {r['member_p99']:.1f}"
            f" | {r['reweight_p50']:.1f} / {r['reweight_p99']:.1f}"
            f" | {r['overhead_p50']:.1f} / {r['overhead_p99']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--groups", type=int, default=40, help="groups of 8 per run")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.groups = 3, 10
    rows = asyncio.run(run_in_process(args))
    rows += asyncio.run(run_store("in-process", None, args))
    rows += asyncio.run(run_store("Redis", args.redis_url, args))
    print(table(rows))
    OUT.mkdir(exist_ok=True)
    meta = {"machine": platform.platform(), "cpus": os.cpu_count(), "G": G, "dim": DIM,
            "runs": args.runs, "groups_per_run": args.groups}  # fmt: skip
    (OUT / "assembly.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
