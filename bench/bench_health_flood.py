"""Benchmark (outside in): does /healthz wait on group assembly under a flood?

Issue 29 point 3: 20,000 members of groups that never complete (each group of 8 gets one
member), timeout_s 2, over 1,000 keep-alive HTTP connections, against `reweighter serve` started
as documented (defaults; `--compile off` so no background compile competes for the CPU). A
prober in another process asks /healthz and /readyz every 50 ms on a connection of its own and
records each latency; the server's RSS is read before and at the end. A baseline of the same
probes with no flood is measured in the same run. Our liveness probe (deploy/k8s/base) fails a
check after 3 s; the target is p100 < 1 s and RSS growth < 300 MB.

    .venv/bin/python bench/bench_health_flood.py                      # the issue's figures
    .venv/bin/python bench/bench_health_flood.py --members 4000 --connections 400
    .venv/bin/python bench/bench_health_flood.py --service-code /tmp/base   # another checkout

Prints a markdown table (with the machine and its load average); writes
bench/out/health_flood.json (or --out). tests/assembly/test_health_flood.py runs it smaller.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import _pct, start_service  # noqa: E402

from reweighter.launch import serve  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


async def _http(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str, path: str,
    body: bytes = b"",
) -> tuple[int, bytes]:  # fmt: skip
    """One HTTP/1.1 keep-alive request on an open connection: (status, body)."""
    head = (
        f"{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return int(status_line.split()[1]), await reader.readexactly(length)


async def _flood(port: int, members: int, connections: int, timeout_s: float) -> dict:
    """`members` members of never-completing groups over `connections` keep-alive
    connections, each connection sending its share one after another."""
    counts = {"answered": 0, "short": 0, "other": 0}

    async def one_connection(c: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for i in range(c, members, connections):
                body = json.dumps({"member_id": "0", "group_size": 8, "reward": 1.0,
                                   "embedding": [1.0, 0.5], "timeout_s": timeout_s}).encode()
                status, out = await _http(reader, writer, "POST",
                                          f"/v1/groups/flood-{i}/members", body)  # fmt: skip
                if status == 200:
                    counts["answered"] += 1
                    counts["short"] += json.loads(out).get("reason") == "short"
                else:
                    counts["other"] += 1
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one_connection(c) for c in range(connections)))
    return {**counts, "flood_s": time.perf_counter() - t0}


def _probe(port: int, seconds: float, period_s: float, out: mp.Queue) -> None:
    """Another process: /healthz and /readyz every `period_s`, latencies in ms."""

    async def run() -> dict:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        lat: dict[str, list[float]] = {"/healthz": [], "/readyz": []}
        bad = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for path in lat:
                t0 = time.perf_counter()
                status, _ = await _http(reader, writer, "GET", path)
                lat[path].append((time.perf_counter() - t0) * 1e3)
                bad += status != 200
            await asyncio.sleep(period_s)
        writer.close()
        return {"lat": lat, "not_200": bad}

    out.put(asyncio.run(run()))


def probe_during(port: int, seconds: float, work=None) -> tuple[dict, dict | None]:  # noqa: ANN001
    q: mp.Queue = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=_probe, args=(port, seconds, 0.05, q))
    p.start()
    result = asyncio.run(work()) if work is not None else None
    probes = q.get(timeout=seconds + 120)
    p.join(10)
    return probes, result


def _row(name: str, probes: dict) -> str:
    h, r = probes["lat"]["/healthz"], probes["lat"]["/readyz"]
    return (f"| {name} | {len(h)} | {statistics.median(h):.1f} | {_pct(h, 0.99):.1f} | "
            f"{max(h):.1f} | {max(r):.1f} | {probes['not_200']} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=20_000)
    ap.add_argument("--connections", type=int, default=1_000)
    ap.add_argument("--timeout-s", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=OUT / "health_flood.json")
    ap.add_argument(
        "--service-code",
        default="",
        help="run the service from this checkout's services/reweighter "
        "(PYTHONPATH), e.g. a worktree of main before a change, for a before/after",
    )
    args = ap.parse_args()
    if args.service_code:  # the same command, another checkout's package first on the path
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        env["PYTHONPATH"] = str(Path(args.service_code).resolve() / "services" / "reweighter")
        served = serve("--compile", "off", env=env, timeout=300)
    else:
        served = start_service("--compile", "off")
    try:
        port = served.http_port
        baseline, _ = probe_during(port, 5.0)
        rss0 = served.rss_mb()
        share = -(-args.members // args.connections)
        seconds = share * args.timeout_s + 15  # the flood's length, and some after
        flooded, counts = probe_during(
            port, seconds, lambda: _flood(port, args.members, args.connections, args.timeout_s)
        )
        rss1 = served.rss_mb()
    finally:
        served.stop()
        if os.environ.get("PYTHONASYNCIODEBUG"):  # diagnosis: the loop's slow callbacks
            print("".join(line for line in served.log().splitlines(keepends=True)
                          if "Executing" in line)[-20000:])  # fmt: skip
    load = os.getloadavg()
    print(f"machine: {platform.node()} {os.cpu_count()} cores; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (after the run)")  # fmt: skip
    print(f"flood: {args.members} members, {args.connections} connections, timeout_s "
          f"{args.timeout_s}: {counts}; server RSS {rss0:.0f} -> {rss1:.0f} MB "
          f"(+{rss1 - rss0:.0f})")  # fmt: skip
    print("\n| probes | n | /healthz p50 ms | p99 ms | max ms | /readyz max ms | not 200 |")
    print("|---|---|---|---|---|---|---|")
    print(_row("no flood (baseline)", baseline))
    print(_row("during the flood", flooded))
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({
        "args": {**vars(args), "out": str(args.out)}, "counts": counts, "rss_mb": [rss0, rss1],
        "load": load, "baseline": baseline, "flooded": flooded}))  # fmt: skip


if __name__ == "__main__":
    main()
