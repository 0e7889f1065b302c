"""Benchmark (in process): where a waiting group-assembly member's memory goes (issue 51 item 4).

bench/bench_health_flood.py sees the server's RSS grow by hundreds of MB under the open-group
flood; RSS says how much, not whose. This measures it with tracemalloc inside one process, in
two layers, and attributes every byte still alive to the code that allocated it:

- `assembler`: a GroupAssembler on the in-process store (as `reweighter serve` builds it, no
  transport), N members of N never-completing groups (group_size 8, one member each, as the
  flood sends them) submitted and left waiting; then, once they all answered short at their
  deadline, what stays (each short round's result is kept `assembly_result_ttl_s` for retries).
- `http`: the service itself (`Service`: uvicorn, our connection guard, admission, FastAPI,
  the assembler) in this process, and a client in another process holding N keep-alive
  connections, one member waiting on each (a waiting HTTP member holds its connection).

Each allocation alive at the second snapshot and not at the first is charged to the innermost
frame of its traceback in reweighter's package (module:function), or, when reweighter is not on
it, to the library that allocated it (uvicorn, h11, asyncio, starlette, ...). Bytes per member =
that difference / N. gc.collect() runs before each snapshot.

    .venv/bin/python bench/bench_member_memory.py                       # both layers, N=3000
    .venv/bin/python bench/bench_member_memory.py --layer assembler --members 5000 --dim 384

Prints markdown tables; writes bench/out/member_memory.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"
_PKG = os.sep + "reweighter" + os.sep


def _body(dim: int, chars: int) -> dict[str, Any]:
    """The flood's member (bench_health_flood: a 2-d embedding) unless told otherwise."""
    member: dict[str, Any] = {"member_id": "0", "group_size": 8, "reward": 1.0}
    if chars:
        member["completion"] = ("x" * (chars - 1)) + "y"
    else:
        member["embedding"] = [1.0 + i / 1000 for i in range(dim)]
    return member


def _where(tb: tracemalloc.Traceback) -> str:
    """The innermost reweighter frame (its file and line), else the library that allocated."""
    frames = list(reversed(tb))  # tracemalloc lists the oldest frame first
    for fr in frames:
        if _PKG in fr.filename and "site-packages" not in fr.filename:
            return f"reweighter/{fr.filename.rsplit(_PKG, 1)[1]}:{fr.lineno}"
    inner = frames[0].filename
    for lib in ("uvicorn", "h11", "httptools", "starlette", "fastapi", "pydantic", "asyncio",
                "anyio", "json", "socket", "selectors"):  # fmt: skip
        if f"{os.sep}{lib}{os.sep}" in inner or inner.endswith(f"{os.sep}{lib}.py"):
            return f"{lib} ({Path(inner).name}:{frames[0].lineno})"
    return f"{Path(inner).name}:{frames[0].lineno}"


def _attribute(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int) -> dict:
    """Bytes per member by allocating site (the difference of two snapshots)."""
    sites: dict[str, int] = defaultdict(int)
    for stat in after.compare_to(before, "traceback"):
        if stat.size_diff:
            sites[_where(stat.traceback)] += stat.size_diff
    total = sum(sites.values())
    rows = sorted(sites.items(), key=lambda kv: -kv[1])
    return {"members": n, "total_bytes": total, "per_member": total / n,
            "sites": [(k, v / n) for k, v in rows]}  # fmt: skip


def _table(title: str, a: dict, top: int) -> str:
    lines = [f"\n### {title}: {a['per_member']:.0f} bytes per member (N={a['members']})\n",
             "| allocated at | bytes / member |", "|---|---|"]  # fmt: skip
    shown = 0.0
    for site, b in a["sites"][:top]:
        lines.append(f"| {site} | {b:.0f} |")
        shown += b
    lines.append(f"| (the rest) | {a['per_member'] - shown:.0f} |")
    return "\n".join(lines)


def _snapshot() -> tracemalloc.Snapshot:
    gc.collect()
    return tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )


# -- layer 1: the assembler alone ------------------------------------------------------------


async def _assembler(n: int, dim: int, chars: int, frames: int) -> dict[str, dict]:
    from reweighter.assembly import GroupAssembler, MemberSubmission, make_store
    from reweighter.config import Settings
    from reweighter.engine import ReweightEngine

    settings = Settings(compile="off")
    asm = GroupAssembler(ReweightEngine(settings), make_store(settings), settings)
    await asm.start()
    body = _body(dim, chars)

    def sub(i: int, timeout_s: float) -> MemberSubmission:
        # the wire's own parse, as the HTTP route gives the assembler a member
        extra = {k: (list(v) if isinstance(v, list) else v) for k, v in body.items()}
        return MemberSubmission(group_id=f"flood-{i}", timeout_s=timeout_s, **extra)

    # warm up: first-use imports, caches and the store's structures, then answered
    warm = [asyncio.ensure_future(asm.submit(sub(-1 - i, 0.2))) for i in range(50)]
    await asyncio.gather(*warm)
    await asyncio.sleep(0.1)
    tracemalloc.start(frames)
    s0 = _snapshot()
    timeout_s = 15.0 + n / 250  # past the first snapshot, which blocks the loop for seconds
    t0 = time.monotonic()
    # deadlines spread (5 ms apart): under tracemalloc a member's answer takes milliseconds, and
    # one answered more than 6 s after its deadline finds its round expired (answered raw)
    tasks = [asyncio.ensure_future(asm.submit(sub(i, timeout_s + i / 200))) for i in range(n)]
    while asm.waiting < n:
        await asyncio.sleep(0.05)
    s1 = _snapshot()  # attributed at the end: comparing blocks the loop past the deadlines
    answers = await asyncio.gather(*tasks)
    assert all(not a.complete for a in answers)
    assert time.monotonic() - t0 >= timeout_s
    del answers, tasks
    await asyncio.sleep(0.2)
    s2 = _snapshot()
    kept = len(asm.store._results)  # type: ignore[attr-defined]
    tracemalloc.stop()
    await asm.aclose()
    out = {"waiting": _attribute(s0, s1, n), "answered_kept": _attribute(s0, s2, n)}
    if kept < n:  # a snapshot blocked the loop past the rounds' expiry: raw answers, not kept
        print(f"note: {kept} of {n} results kept; the kept figures are not a member's")
        out.pop("answered_kept")
    return out


# -- layer 2: the service over HTTP ------------------------------------------------------------


def _client(port: int, n: int, body: dict[str, Any], timeout_s: float, prefix: str) -> None:
    """Another process: n connections, one member waiting on each; prints `sent` once all
    requests are written, then waits for the answers."""

    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        data = json.dumps({**body, "timeout_s": timeout_s}).encode()
        writer.write((f"POST /v1/groups/{prefix}{i}/members HTTP/1.1\r\nhost: x\r\n"
                      f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
                      ).encode() + data)  # fmt: skip
        await writer.drain()
        status = await reader.readline()
        if i == 0:
            print(status.decode().strip(), flush=True)
        writer.close()

    async def run() -> None:
        tasks = []
        for i in range(n):
            tasks.append(asyncio.ensure_future(one(i)))
            if i % 200 == 199:
                await asyncio.sleep(0.05)
        print("sent", flush=True)
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())


async def _http(n: int, dim: int, chars: int, frames: int) -> dict[str, dict]:
    import logging

    from reweighter.config import Settings
    from reweighter.service import Service

    logging.disable(logging.WARNING)
    settings = Settings(compile="off", http_port=0, grpc_port=0, host="127.0.0.1",
                        max_connections=max(16384, 2 * n))  # fmt: skip
    service = Service(settings, log_config=None)
    await service.start()
    while not service.engine.ready:
        await asyncio.sleep(0.2)
    body = _body(dim, chars)
    timeout_s = 20.0 + n / 200

    def flood(count: int, timeout: float, prefix: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, __file__, "--client", str(service.http_port), str(count),
             json.dumps(body), str(timeout), prefix],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    async def until_waiting(count: int) -> None:
        end = time.monotonic() + 120
        while service.assembler.waiting < count:
            if time.monotonic() > end or client.poll() is not None:
                client.kill()
                print("client:", client.communicate()[0][-2000:])
                raise TimeoutError(f"{service.assembler.waiting} of {count} members waiting")
            await asyncio.sleep(0.05)

    warm = flood(50, 0.2, "warm-")  # first use of every path, answered
    out, _ = await asyncio.to_thread(warm.communicate, None, 120)
    print("warm-up:", out.split())
    await asyncio.sleep(0.5)
    tracemalloc.start(frames)
    s0 = _snapshot()
    client = flood(n, timeout_s, "flood-")
    await until_waiting(n)
    await asyncio.sleep(0.5)
    s1 = _snapshot()
    tracemalloc.stop()
    client.kill()
    await asyncio.to_thread(client.wait)
    await service.stop(grace=1.0)
    return {"waiting": _attribute(s0, s1, n)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        _, _, port, n, body, timeout_s, prefix = sys.argv
        _client(int(port), int(n), json.loads(body), float(timeout_s), prefix)
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", choices=["assembler", "http", "both"], default="both")
    ap.add_argument("--members", type=int, default=3000)
    ap.add_argument("--dim", type=int, default=2, help="embedding width (the flood's: 2)")
    ap.add_argument("--chars", type=int, default=0, help="send a completion of this length")
    ap.add_argument("--frames", type=int, default=10, help="tracemalloc traceback depth")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", type=Path, default=OUT / "member_memory.json")
    args = ap.parse_args()
    os.environ.setdefault("REWEIGHTER_COMPILE", "off")
    results: dict[str, Any] = {"args": {**vars(args), "out": str(args.out)}}
    payload = f"{args.chars}-char completion" if args.chars else f"{args.dim}-d embedding"
    if args.layer in ("assembler", "both"):
        r = asyncio.run(_assembler(args.members, args.dim, args.chars, args.frames))
        results["assembler"] = r
        print(_table(f"assembler, waiting ({payload})", r["waiting"], args.top))
        if "answered_kept" in r:
            print(_table(f"assembler, answered short, result kept ({payload})",
                         r["answered_kept"], args.top))  # fmt: skip
    if args.layer in ("http", "both"):
        r = asyncio.run(_http(args.members, args.dim, args.chars, args.frames))
        results["http"] = r
        print(_table(f"HTTP service, waiting ({payload}, one connection each)", r["waiting"],
                     args.top))  # fmt: skip
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
