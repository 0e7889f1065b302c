"""Benchmark: client CPU per group member, the cost a reward worker (verl) pays on every sample.

Starts the service as documented (`reweighter serve`, eager encoder), then for each client and
each concurrency spawns a client process that submits N members at once (N/8 groups of 8, 384-d
embeddings given, so the encoder is out of the picture) and measures, in that process, the CPU
it spent (time.process_time: every thread of the process, the sync client's loop thread
included) and the wall time; the server's CPU over the same window comes from /proc. Each cell
is the median of several runs, each in a fresh client process after one warm-up round.

Clients (rows):
  http            AsyncReweighterClient.submit_member (aiohttp), in the caller's loop
  grpc            AsyncGrpcReweighterClient.submit_member (grpc.aio)
  http-connect    connect(url).submit_member_async from another loop: what the verl adapter does
  grpc-connect    the same over grpc://
  httpx-pool      baseline: raw JSON posts through one unbounded httpx.AsyncClient pool (what the
                  HTTP client was before; needs httpx, in the server extra)
  aiohttp-raw     baseline: raw JSON posts through one aiohttp session

    .venv/bin/python bench/bench_client.py            # 5 runs per cell, 64 and 512 members
    .venv/bin/python bench/bench_client.py --quick    # 3 runs per cell
Prints a markdown table and writes bench/out/client.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
G, DIM = 8, 384
KINDS = ("http", "grpc", "http-connect", "grpc-connect", "httpx-pool", "aiohttp-raw")


# -- the client process -------------------------------------------------------------------------


def _members(n: int, seed: int) -> list[tuple[str, str, float, list[float]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n // G):
        gid = uuid.uuid4().hex
        out += [(gid, f"{i:02d}", float(rng.random() < 0.5), [rng.gauss(0, 1) for _ in range(DIM)])
                for i in range(G)]  # fmt: skip
    return out


def _raw_body(member_id: str, reward: float, vec: list[float]) -> bytes:
    body = {"member_id": member_id, "group_size": G, "reward": reward, "embedding": vec,
            "timeout_s": 60}  # fmt: skip
    return json.dumps(body).encode()


async def _sender(kind: str, url: str, target: str):  # noqa: ANN202 - (send, close)
    """A coroutine function sending one member, and the close of what it holds."""
    if kind in ("http", "grpc"):
        from reweighter.client import AsyncGrpcReweighterClient, AsyncReweighterClient

        client = AsyncReweighterClient(url) if kind == "http" else AsyncGrpcReweighterClient(target)

        async def send(gid: str, mid: str, r: float, vec: list[float]) -> bool:
            res = await client.submit_member(gid, mid, G, r, embedding=vec, timeout_s=60)
            return res.complete

        return send, client.close
    if kind in ("http-connect", "grpc-connect"):
        from reweighter.client import connect

        sync = connect(url if kind == "http-connect" else f"grpc://{target}")

        async def send(gid: str, mid: str, r: float, vec: list[float]) -> bool:
            res = await sync.submit_member_async(gid, mid, G, r, embedding=vec, timeout_s=60)
            return res.complete

        async def close() -> None:
            sync.close()

        return send, close
    if kind == "httpx-pool":
        import httpx

        pool = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(120.0, pool=None),
                                 limits=httpx.Limits(max_connections=None))  # fmt: skip

        async def send(gid: str, mid: str, r: float, vec: list[float]) -> bool:
            for attempt in range(3):  # a kept-alive connection the server closed: send again
                try:
                    resp = await pool.post(
                        f"/v1/groups/{gid}/members", content=_raw_body(mid, r, vec),
                        headers={"content-type": "application/json"},
                    )  # fmt: skip
                    return bool(resp.json()["complete"])
                except httpx.TransportError:
                    if attempt == 2:
                        raise
            return False

        return send, pool.aclose
    if kind == "aiohttp-raw":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        async def send(gid: str, mid: str, r: float, vec: list[float]) -> bool:
            async with session.post(f"{url}/v1/groups/{gid}/members", data=_raw_body(mid, r, vec),
                                    headers={"content-type": "application/json"}) as resp:
                return bool(json.loads(await resp.read())["complete"])

        return send, session.close
    raise ValueError(kind)


async def _child(kind: str, n: int, url: str, target: str, seed: int) -> dict:
    send, close = await _sender(kind, url, target)
    try:
        warm = _members(64, seed + 1)
        assert all(await asyncio.gather(*(send(*m) for m in warm)))
        members = _members(n, seed)
        t_cpu, t_wall = time.process_time(), time.perf_counter()
        done = await asyncio.gather(*(send(*m) for m in members))
        cpu, wall = time.process_time() - t_cpu, time.perf_counter() - t_wall
        assert all(done), "a group did not complete"
    finally:
        await close()
    return {"cpu_s": cpu, "wall_s": wall}


# -- the parent: the service, the grid, the table ----------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve() -> tuple[subprocess.Popen, str, str]:
    """`reweighter serve` as docs/service.md gives it, on free loopback ports, once ready."""
    http_port, grpc_port = _free_port(), _free_port()
    exe = shutil.which("reweighter", path=str(Path(sys.executable).parent)) or "reweighter"
    cmd = [exe, "serve", "--host", "127.0.0.1", "--http-port", str(http_port), "--grpc-port",
           str(grpc_port), "--log-level", "warning", "--compile", "off"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    url = f"http://127.0.0.1:{http_port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("reweighter serve did not become ready")
        time.sleep(0.3)
    return proc, url, f"127.0.0.1:{grpc_port}"


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run_child(kind: str, n: int, url: str, target: str, seed: int, server_pid: int) -> dict:
    s0 = _proc_cpu(server_pid)
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(n), url, target, str(seed)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{kind} {n}: {done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["server_cpu_s"] = _proc_cpu(server_pid) - s0  # includes the warm-up round
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 runs per cell")
    p.add_argument("--runs", type=int, default=None)
    p.add_argument("--members", type=int, nargs="+", default=[64, 512])
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    args = p.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    proc, url, target = _serve()
    rows = []
    try:
        for kind in args.kinds:
            for n in args.members:
                cells = [_run_child(kind, n, url, target, 1000 * i + n, proc.pid)
                         for i in range(runs)]  # fmt: skip
                rows.append({
                    "client": kind, "members": n, "runs": runs,
                    "cpu_ms_per_member": statistics.median(c["cpu_s"] for c in cells) / n * 1e3,
                    "wall_s": statistics.median(c["wall_s"] for c in cells),
                    "server_cpu_s": statistics.median(c["server_cpu_s"] for c in cells),
                    "load1": os.getloadavg()[0],
                })  # fmt: skip
                print(f"{kind:>13} {n:>4}: {rows[-1]['cpu_ms_per_member']:.2f} ms CPU/member",
                      file=sys.stderr)  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\nclient CPU per member, {G}-member groups, {DIM}-d embeddings given; median of "
          f"{runs} runs; {when}; {os.cpu_count()} CPUs\n")
    print("| client | members at once | client CPU ms / member | wall s | server CPU s* | load1 |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['client']} | {r['members']} | {r['cpu_ms_per_member']:.2f} | "
              f"{r['wall_s']:.2f} | {r['server_cpu_s']:.2f} | {r['load1']:.2f} |")
    print("\n*server CPU over the client process's life (warm-up round of 64 included)")
    OUT.mkdir(exist_ok=True)
    (OUT / "client.json").write_text(json.dumps({"when": when, "rows": rows}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, n, url, target, seed = sys.argv[2:7]
        print(json.dumps(asyncio.run(_child(kind, int(n), url, target, int(seed)))))
    else:
        main()
