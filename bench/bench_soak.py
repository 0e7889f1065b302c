"""Benchmark (outside in): a long run of mixed traffic; does anything grow, drift or go wrong?

Starts its own `redis-server` (a free loopback port, no persistence, so that it can be
restarted) and `reweighter serve` (HTTP + gRPC, `--compile off`, started as documented with
reweighter.launch) with Redis on (`redis_url`: the embedding cache behind the in-process LRU,
group assembly's store, the answer memory) and a tenants file of two tenants (`alpha`,
`beta`). The in-process caches are bounded small (the vector LRU to 8 MB, the word cache to
4,096 words) so that they are full within the warm-up and a growth after it is not a cache
filling. Then, for `--minutes`, closed-loop clients (each sends, waits for the answer, sleeps
`--pace-s`):

- `/v1/reweight` over HTTP (tenant alpha) and gRPC (tenant beta): groups of 8 completions,
  half repeated from a pool of 400 (cache hits), half never seen before; DRA and MMR in turn;
- group assembly over HTTP (alpha) and gRPC (beta): groups of 4 members sent at once, one
  group in 5 abandoned (2 of its 4 members sent, `timeout_s` 4: they must answer `short`);
- OpenAI `/v1/embeddings` (4 inputs), the two tenants in turn;
- once, at 40 % of the run: beta's key rotated (the file rewritten, SIGHUP); beta's clients
  pause, the old key must then get 401 and the new one 200, and beta resumes with the new key;
- once, at 60 %: Redis stopped, kept down `--redis-down-s`, started again (empty). Errors are
  allowed only in that window (calls under way at any time from the stop to 40 s after Redis
  is back: a member's timeout and a margin) and only the documented ones: 503 / UNAVAILABLE
  `StoreUnavailable` or `MemoryUnavailable`, a member answered incomplete (`store_unavailable`,
  `short`, or `computing`: its group's state went with the old Redis; docs/integrations.md).
  Anything else, or any error outside the window, fails the run.

Every 10 s: the server's RSS, open file descriptors and threads (/proc), and from /metrics the
caches' sizes (`reweighter_cache_entries` / `_bytes`, `reweighter_word_cache_words`), waiting
members, open groups, HTTP connections, Redis errors; the load average (the machine is shared).
One request in `--verify-every` is re-answered fresh by the engine in this process (no cache,
the same settings) and compared: rewards within 1e-4, advantages within 1e-3, embeddings within
1e-4 (the tolerances of the suite's own service-vs-engine tests: a batch's composition changes
fp32 sums in the last bits). Members of completed groups are checked the same way against the
whole group reweighted at once.

Fails (exit 1, the reasons printed) when, after the warm-up (the first third of the run):
- RSS grows faster than `--max-rss-slope` MB/min (least squares over the samples). Default
  1.0: a day at that rate adds 1.4 GB, past the 2 GiB the deployment requests
  (deploy/k8s/base/reweighter-deployment.yaml); what the allocator's noise gives over 20
  minutes is well below it;
- open descriptors or threads grow: the second half's maximum above the first half's by more
  than `--fd-slack` (10: connections come and go) or `--thread-slack` (2);
- p99 drifts: the median of the last third's per-minute p99 (request/answer calls: reweight and
  embeddings) above `--p99-factor` (2.5) x the first post-warm-up third's; the minutes of the
  rotation and the restart are left out. 2.5, not less: on this shared 2-core machine the
  neighbours' load alone moves a minute's p99 by 2x (see the load column);
- any answer differs from its fresh computation, any error is not allowed (above), the
  rotation or the restart did not happen, or nothing was verified.

    .venv/bin/python bench/bench_soak.py                 # 30 minutes
    .venv/bin/python bench/bench_soak.py --minutes 1.5   # the short form (tests/bench)

Prints a markdown table (one row a minute) and the verdict; writes bench/out/soak.json and
bench/out/soak.png (or --out, with .png beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import _pct  # noqa: E402

from reweighter.client import AsyncGrpcReweighterClient, AsyncReweighterClient, RetryPolicy  # noqa: E402
from reweighter.errors import ReweighterError  # noqa: E402
from reweighter.launch import Served, serve  # noqa: E402
from reweighter.service import free_port  # noqa: E402
from reweighter.types import Group, MemberSubmission, ReweightRequest  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
TENANTS = ("alpha", "beta")
KEYS = {"alpha": "soak-alpha-key-1", "beta": "soak-beta-key-1"}
NEW_BETA_KEY = "soak-beta-key-2"
ALLOWED_IN_RESTART = {
    "http 503 StoreUnavailable", "http 503 MemoryUnavailable",
    "grpc UNAVAILABLE StoreUnavailable", "grpc UNAVAILABLE MemoryUnavailable",
    "member store_unavailable", "member short", "member computing",
}  # fmt: skip
RESTART_MARGIN_S = 40.0  # a complete group's member timeout (30 s) and a margin
REQUEST_KINDS = ("reweight http", "reweight grpc", "embeddings")
_WORDS = ["first", "we", "compute", "the", "product", "then", "carry", "the", "digit", "so",
          "partial", "sum", "becomes", "checking", "again", "remainder", "is", "small", "hence",
          "total", "equals", "therefore", "it"]  # fmt: skip


# -- what the server is doing -----------------------------------------------------------------


class Redis:
    """A redis-server of our own on a free port, without persistence, so it can be restarted."""

    def __init__(self, workdir: Path) -> None:
        self.port, self.workdir, self.proc = free_port(), workdir, None
        self.log = workdir / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(self.workdir)]  # fmt: skip
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def proc_stats(pid: int) -> dict[str, float]:
    """RSS (MB; and its anonymous and file-backed parts), threads and open descriptors of a
    process, from /proc."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            out["rss_mb"] = int(line.split()[1]) / 1024
        elif line.startswith(("RssAnon:", "RssFile:")):
            out[line.split(":")[0].lower().replace("rss", "rss_") + "_mb"] = (
                int(line.split()[1]) / 1024
            )
        elif line.startswith("Threads:"):
            out["threads"] = int(line.split()[1])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


GAUGES = ("reweighter_cache_entries", "reweighter_cache_bytes", "reweighter_word_cache_words",
          "reweighter_assembly_waiting_members", "reweighter_assembly_open_groups",
          "reweighter_assembly_store_groups", "reweighter_http_connections",
          "reweighter_redis_errors_total", "reweighter_cache_hits_total",
          "reweighter_cache_misses_total", "reweighter_texts_encoded_total")  # fmt: skip


def scrape(url: str) -> dict[str, float]:
    """The unlabelled gauges and counters above from /metrics (missing ones: absent)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    got = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in GAUGES:
            got[name] = float(value)
    return got


# -- the traffic --------------------------------------------------------------------------------


class Texts:
    """Reasoning-like completions (~40 words): a repeated pool, and fresh ones never seen."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.counter = itertools.count()
        self.pool = [self._make(f"pool {i}") for i in range(400)]

    def _make(self, head: str) -> str:
        a, b = self.rng.randint(10, 999), self.rng.randint(10, 99)
        words = " ".join(self.rng.choices(_WORDS, k=30))
        return f"{head}. Step: {a} * {b} = {a * b}, {words}."

    def fresh(self) -> str:
        return self._make(f"soak attempt {next(self.counter)}")

    def mixed(self, n: int) -> list[str]:
        return [self.rng.choice(self.pool) if i % 2 else self.fresh() for i in range(n)]


class Soak:
    def __init__(self, args: argparse.Namespace, served: Served, redis: Redis,
                 tenants_path: Path) -> None:  # fmt: skip
        self.args, self.served, self.redis, self.tenants_path = args, served, redis, tenants_path
        self.t0 = time.monotonic()
        self.end = self.t0 + args.minutes * 60
        self.texts = Texts(args.seed)
        self.keys = dict(KEYS)
        self.events: list[tuple[float, str, float, str]] = []  # (t s, kind, ms, outcome)
        self.samples: list[dict[str, Any]] = []
        self.marks: dict[str, float] = {}  # rotation / restart times (s from the start)
        self.checks: dict[str, Any] = {}
        self.verify_q: asyncio.Queue = asyncio.Queue(maxsize=64)
        self.verified = 0
        self.wrong: list[dict] = []
        self.beta_go = asyncio.Event()
        self.beta_go.set()
        self.counter = itertools.count()
        self.http: dict[str, AsyncReweighterClient] = {}
        self.grpc: dict[str, AsyncGrpcReweighterClient] = {}
        self.old_clients: list[Any] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, kind: str, t_start: float, outcome: str) -> None:
        self.events.append((t_start - self.t0, kind, (time.monotonic() - t_start) * 1e3, outcome))

    def clients(self, tenant: str) -> None:
        retry = RetryPolicy(retries=0)  # every error is seen, none hidden by a retry
        self.http[tenant] = AsyncReweighterClient(self.served.url, api_key=self.keys[tenant],
                                                  retry=retry, timeout=120)  # fmt: skip
        self.grpc[tenant] = AsyncGrpcReweighterClient(self.served.target,
                                                      api_key=self.keys[tenant], retry=retry,
                                                      timeout=120)  # fmt: skip

    async def gate(self, tenant: str) -> None:
        if tenant == "beta":
            await self.beta_go.wait()

    def sample_verify(self, item: tuple) -> None:
        if next(self.counter) % self.args.verify_every == 0:
            with contextlib.suppress(asyncio.QueueFull):
                self.verify_q.put_nowait(item)

    # one closed-loop client per kind of traffic

    async def reweight_loop(self, transport: str, tenant: str) -> None:
        for i in itertools.count():
            if time.monotonic() >= self.end:
                return
            await self.gate(tenant)
            texts = self.texts.mixed(8)
            method = "dra" if i % 2 == 0 else "mmr"
            req = ReweightRequest(groups=[Group([float(j % 2) for j in range(8)], texts)],
                                  method=method, advantages="grpo")  # fmt: skip
            client = self.http[tenant] if transport == "http" else self.grpc[tenant]
            t = time.monotonic()
            try:
                got = await client.reweight(req)
            except ReweighterError as e:
                self.record(f"reweight {transport}", t, self.label(transport, e))
            else:
                self.record(f"reweight {transport}", t, "ok")
                self.sample_verify(("reweight", req, got))
            await asyncio.sleep(self.args.pace_s)

    async def members_loop(self, transport: str, tenant: str) -> None:
        for g in itertools.count():
            if time.monotonic() >= self.end:
                return
            await self.gate(tenant)
            gid = f"soak-{transport}-{g}"
            abandoned = g % 5 == 4
            texts, rewards = self.texts.mixed(4), [1.0, 0.0, 0.5, 0.0]
            sent = 2 if abandoned else 4
            timeout_s = 4.0 if abandoned else 30.0
            client = self.http[tenant] if transport == "http" else self.grpc[tenant]
            kind = f"members {transport}" + (" abandoned" if abandoned else "")

            async def one(m: int, client: Any = client, gid: str = gid, texts: list = texts,
                          rewards: list = rewards, timeout_s: float = timeout_s,
                          kind: str = kind, abandoned: bool = abandoned) -> Any:  # fmt: skip
                t = time.monotonic()
                sub = MemberSubmission(gid, str(m), 4, rewards[m], completion=texts[m],
                                       method="dra", advantages="grpo",
                                       timeout_s=timeout_s)  # fmt: skip
                try:
                    got = await client.submit_member(sub)
                except ReweighterError as e:
                    self.record(kind, t, self.label(transport, e))
                    return None
                if abandoned:
                    ok = not got.complete and got.reason == "short" and got.members == 2
                    self.record(kind, t, "ok" if ok else f"member {got.reason or 'complete'}")
                elif got.complete:
                    self.record(kind, t, "ok")
                else:
                    self.record(kind, t, f"member {got.reason}")
                return got

            answers = await asyncio.gather(*(one(m) for m in range(sent)))
            if not abandoned and all(a is not None and a.complete for a in answers):
                req = ReweightRequest(groups=[Group(rewards, texts)], method="dra",
                                      advantages="grpo")  # fmt: skip
                self.sample_verify(("members", req, answers))
            await asyncio.sleep(self.args.pace_s)

    async def embeddings_loop(self) -> None:
        async with httpx.AsyncClient(base_url=self.served.url, timeout=120) as http:
            for i in itertools.count():
                if time.monotonic() >= self.end:
                    return
                tenant = TENANTS[i % 2]
                await self.gate(tenant)
                texts = self.texts.mixed(4)
                t = time.monotonic()
                key = {"authorization": f"Bearer {self.keys[tenant]}"}
                r = await http.post("/v1/embeddings", headers=key, json={
                    "input": texts, "model": "sentence-transformers/all-MiniLM-L6-v2"})  # fmt: skip
                if r.status_code == 200:
                    self.record("embeddings", t, "ok")
                    vecs = [d["embedding"] for d in sorted(r.json()["data"],
                                                           key=lambda d: d["index"])]  # fmt: skip
                    self.sample_verify(("embeddings", texts, vecs))
                else:
                    kind = r.json().get("error", {}).get("type", "?") if r.content else "?"
                    self.record("embeddings", t, f"http {r.status_code} {kind}")
                await asyncio.sleep(self.args.pace_s)

    @staticmethod
    def label(transport: str, e: ReweighterError) -> str:
        if transport == "http":
            return f"http {e.http_status} {type(e).__name__}"
        return f"grpc {e.grpc_code} {type(e).__name__}"

    # the fresh computation

    async def verifier(self) -> None:
        import numpy as np

        from reweighter.config import Settings
        from reweighter.engine import ReweightEngine

        # the service's settings, but no cache: every vector computed again, here
        engine = ReweightEngine(Settings(compile="off", cache_max_bytes=0, redis_url=None))
        await asyncio.to_thread(engine.load)
        try:
            while True:
                kind, req, got = await self.verify_q.get()
                if kind == "embeddings":
                    want = (await engine.aembed(req)).embeddings
                    diff = float(np.max(np.abs(np.asarray(got, dtype=np.float32) - want)))
                    bad = diff > 1e-4
                    detail: dict[str, Any] = {"max_abs_diff": diff}
                else:
                    want_g = (await engine.areweight(req)).groups[0]
                    if kind == "members":
                        rewards = [a.reward for a in got]
                        advs = [a.advantage for a in got]
                    else:
                        rewards, advs = got.groups[0].rewards, got.groups[0].advantages
                    dr = max(abs(a - b) for a, b in zip(rewards, want_g.rewards, strict=True))
                    da = max(abs(a - b) for a, b in zip(advs, want_g.advantages, strict=True))
                    bad = dr > 1e-4 or da > 1e-3
                    detail = {"reward_diff": dr, "advantage_diff": da}
                self.verified += 1
                if bad:
                    self.wrong.append({"t": self.now(), "kind": kind, **detail})
                    print(f"WRONG ANSWER ({kind}): {detail}", file=sys.stderr)
        finally:
            await engine.aclose()

    # the two events and the sampler

    async def rotate(self) -> None:
        """Beta's key rotated: beta pauses, the file is rewritten, SIGHUP; the old key must get
        401 and the new one 200 (as docs/operations.md says); beta resumes with the new key."""
        self.beta_go.clear()
        await asyncio.sleep(2.0)  # requests already sent reach the server under the old key
        self.marks["rotation"] = self.now()
        write_tenants(self.tenants_path, {**KEYS, "beta": NEW_BETA_KEY})
        self.served.proc.send_signal(signal.SIGHUP)
        async with httpx.AsyncClient(base_url=self.served.url, timeout=30) as http:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                new = await http.get(
                    "/v1/info", headers={"authorization": f"Bearer {NEW_BETA_KEY}"}
                )
                if new.status_code == 200:
                    break
                await asyncio.sleep(0.1)
            old = await http.get("/v1/info", headers={"authorization": f"Bearer {KEYS['beta']}"})
        self.checks["rotation"] = {"new_key": new.status_code, "old_key": old.status_code,
                                   "seconds": self.now() - self.marks["rotation"]}  # fmt: skip
        self.keys["beta"] = NEW_BETA_KEY
        self.old_clients += [self.http["beta"], self.grpc["beta"]]
        self.clients("beta")
        self.beta_go.set()

    async def restart_redis(self) -> None:
        self.marks["redis_stop"] = self.now()
        await asyncio.to_thread(self.redis.stop)
        await asyncio.sleep(self.args.redis_down_s)
        await asyncio.to_thread(self.redis.start)
        self.marks["redis_up"] = self.now()
        self.checks["redis_restart"] = {"down_s": self.marks["redis_up"] - self.marks["redis_stop"]}

    async def sampler(self) -> None:
        pid = self.served.proc.pid
        while True:
            row: dict[str, Any] = {"t": self.now(), **proc_stats(pid)}
            row["load1"] = os.getloadavg()[0]
            with contextlib.suppress(httpx.HTTPError):
                row.update(await asyncio.to_thread(scrape, self.served.url))
            self.samples.append(row)
            if time.monotonic() >= self.end:
                return
            await asyncio.sleep(min(self.args.sample_s, max(0.0, self.end - time.monotonic())))

    async def schedule(self) -> None:
        span = self.end - self.t0
        await asyncio.sleep(0.4 * span)
        await self.rotate()
        await asyncio.sleep(max(0.0, self.t0 + 0.6 * span - time.monotonic()))
        await self.restart_redis()

    async def run(self) -> None:
        for tenant in TENANTS:
            self.clients(tenant)
        verifier = asyncio.create_task(self.verifier())
        background = [asyncio.create_task(self.sampler()), asyncio.create_task(self.schedule())]
        loops = [
            self.reweight_loop("http", "alpha"), self.reweight_loop("grpc", "beta"),
            self.members_loop("http", "alpha"), self.members_loop("grpc", "beta"),
            self.embeddings_loop(),
        ]  # fmt: skip
        await asyncio.gather(*loops)
        await asyncio.gather(*background)
        deadline = time.monotonic() + 120  # let the verifier finish what was sampled
        while not self.verify_q.empty() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        verifier.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await verifier
        for c in [*self.http.values(), *self.grpc.values(), *self.old_clients]:
            await c.close()


def write_tenants(path: Path, keys: dict[str, str]) -> None:
    tmp = path.with_suffix(".tmp")  # written whole, then renamed: the server never reads half
    tmp.write_text(json.dumps({"tenants": [{"name": n, "key": k} for n, k in keys.items()]}))
    tmp.replace(path)


# -- the verdict --------------------------------------------------------------------------------


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0 with fewer than two)."""
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def minutes_table(soak: Soak) -> list[dict[str, Any]]:
    rows = []
    n = int(-(-soak.args.minutes // 1))
    for m in range(n):
        ev = [e for e in soak.events if m * 60 <= e[0] < (m + 1) * 60]
        lat = [e[2] for e in ev if e[1] in REQUEST_KINDS and e[3] == "ok"]
        members = [e[2] for e in ev if e[1] in ("members http", "members grpc") and e[3] == "ok"]
        errors: dict[str, int] = defaultdict(int)
        for e in ev:
            if e[3] != "ok":
                errors[e[3]] += 1
        s = [x for x in soak.samples if x["t"] < (m + 1) * 60]
        last = s[-1] if s else {}
        rows.append({
            "minute": m + 1, "requests": len(ev), "p50_ms": _pct(lat, 0.5) if lat else None,
            "p99_ms": _pct(lat, 0.99) if lat else None,
            "member_p50_ms": _pct(members, 0.5) if members else None,
            "errors": dict(errors), **{k: last.get(k) for k in (
                "rss_mb", "fds", "threads", "load1", "reweighter_cache_entries",
                "reweighter_cache_bytes", "reweighter_word_cache_words",
                "reweighter_assembly_waiting_members", "reweighter_assembly_open_groups")},
        })  # fmt: skip
    return rows


def verdict(soak: Soak, rows: list[dict]) -> tuple[list[str], dict[str, Any]]:
    a, fails = soak.args, []
    warm_s = a.minutes * 60 * a.warmup
    post = [s for s in soak.samples if s["t"] >= warm_s]
    rss_slope = slope([(s["t"] / 60, s["rss_mb"]) for s in post])
    half = len(post) // 2
    first, second = post[:half] or post, post[half:] or post
    fd_growth = max(s["fds"] for s in second) - max(s["fds"] for s in first)
    thread_growth = max(s["threads"] for s in second) - max(s["threads"] for s in first)
    # the p99 drift over whole minutes after the warm-up, the two events' minutes left out
    event_min = {int(t // 60) + 1 for k, t in soak.marks.items()}
    event_min |= {int((soak.marks.get("redis_up", -1e9) + RESTART_MARGIN_S) // 60) + 1}
    steady = [r for r in rows if (r["minute"] - 1) * 60 >= warm_s and r["p99_ms"] is not None
              and r["minute"] not in event_min]  # fmt: skip
    third = max(1, len(steady) // 3)
    p99_first = statistics.median(r["p99_ms"] for r in steady[:third]) if steady else None
    p99_last = statistics.median(r["p99_ms"] for r in steady[-third:]) if steady else None
    drift = p99_last / p99_first if p99_first else None
    # errors: only the documented ones, only in the restart window
    lo = soak.marks.get("redis_stop", 1e18)
    hi = soak.marks.get("redis_up", 1e18) + RESTART_MARGIN_S
    unexpected: dict[str, int] = defaultdict(int)
    in_window: dict[str, int] = defaultdict(int)
    for t, kind, ms, outcome in soak.events:
        if outcome == "ok":
            continue
        # a call in the window: one that was under way at any time in it
        if t <= hi and t + ms / 1e3 >= lo and outcome in ALLOWED_IN_RESTART:
            in_window[f"{kind}: {outcome}"] += 1
        else:
            unexpected[f"{kind}: {outcome}"] += 1
    summary = {
        "rss_slope_mb_min": rss_slope, "fd_growth": fd_growth, "thread_growth": thread_growth,
        "p99_first_ms": p99_first, "p99_last_ms": p99_last, "p99_drift": drift,
        "verified": soak.verified, "wrong": len(soak.wrong),
        "errors_in_restart_window": dict(in_window), "unexpected_errors": dict(unexpected),
        "requests": len(soak.events),
        "requests_by_kind": {k: sum(e[1] == k for e in soak.events)
                             for k in sorted({e[1] for e in soak.events})},
        "warmup_s": warm_s, "marks": soak.marks, "checks": soak.checks,
    }  # fmt: skip
    if rss_slope > a.max_rss_slope:
        fails.append(f"RSS grows {rss_slope:.2f} MB/min after the warm-up (> {a.max_rss_slope})")
    if fd_growth > a.fd_slack:
        fails.append(f"open descriptors grew by {fd_growth} (> {a.fd_slack})")
    if thread_growth > a.thread_slack:
        fails.append(f"threads grew by {thread_growth} (> {a.thread_slack})")
    if drift is not None and drift > a.p99_factor:
        fails.append(f"p99 drifted {p99_first:.0f} -> {p99_last:.0f} ms ({drift:.2f}x > "
                     f"{a.p99_factor}x)")  # fmt: skip
    if soak.wrong:
        fails.append(f"{len(soak.wrong)} answers differ from their fresh computation")
    if unexpected:
        fails.append(f"errors not allowed: {dict(unexpected)}")
    if soak.verified == 0:
        fails.append("nothing was verified")
    rot = soak.checks.get("rotation")
    if not rot or rot["new_key"] != 200 or rot["old_key"] != 401:
        fails.append(f"the key rotation did not take: {rot}")
    if "redis_restart" not in soak.checks:
        fails.append("Redis was not restarted")
    return fails, summary


def print_table(rows: list[dict], summary: dict, soak: Soak) -> None:
    load = os.getloadavg()
    print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores, shared "
          f"with other work; load average at the end "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")  # fmt: skip
    print(
        f"events (s from the start): {json.dumps({k: round(v, 1) for k, v in soak.marks.items()})}"
    )
    print(
        "\n| min | requests | p50 / p99 ms | member p50 ms | RSS MB | fds | threads | "
        "vector cache entries / MB | word cache | waiting members | errors | load 1 min |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")

    def f(v: Any, fmt: str = ".0f") -> str:
        return "-" if v is None else format(v, fmt)

    for r in rows:
        cache_mb = (
            None if r["reweighter_cache_bytes"] is None else r["reweighter_cache_bytes"] / 2**20
        )
        err = ", ".join(f"{k} x{v}" for k, v in r["errors"].items()) or "0"
        print(
            f"| {r['minute']} | {r['requests']} | {f(r['p50_ms'])} / {f(r['p99_ms'])} | "
            f"{f(r['member_p50_ms'])} | {f(r['rss_mb'])} | {f(r['fds'])} | {f(r['threads'])} | "
            f"{f(r['reweighter_cache_entries'])} / {f(cache_mb, '.1f')} | "
            f"{f(r['reweighter_word_cache_words'])} | "
            f"{f(r['reweighter_assembly_waiting_members'])} | {err} | {f(r['load1'], '.1f')} |"
        )
    s = summary
    print(
        f"\nafter the warm-up ({s['warmup_s'] / 60:.1f} min): RSS slope "
        f"{s['rss_slope_mb_min']:+.2f} MB/min (bound {soak.args.max_rss_slope}); fds "
        f"{s['fd_growth']:+d}, threads {s['thread_growth']:+d}; p99 {f(s['p99_first_ms'])} -> "
        f"{f(s['p99_last_ms'])} ms ({f(s['p99_drift'], '.2f')}x, bound {soak.args.p99_factor}x)"
    )
    print(f"verified {s['verified']} answers against a fresh computation: {s['wrong']} differ")
    print(f"requests {s['requests']} {s['requests_by_kind']}")
    print(f"errors in the Redis restart window (allowed): {s['errors_in_restart_window']}")
    print(f"errors not allowed: {s['unexpected_errors']}")
    print(f"checks: {s['checks']}")


def plot(soak: Soak, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] / 60 for s in soak.samples]
    fig, axes = plt.subplots(4, 1, figsize=(7, 9), sharex=True)
    axes[0].plot(t, [s["rss_mb"] for s in soak.samples], label="server RSS (MB)")
    axes[0].set_ylabel("RSS MB")
    axes[1].plot(t, [s["fds"] for s in soak.samples], label="open fds")
    axes[1].plot(t, [s["threads"] for s in soak.samples], label="threads")
    axes[1].legend(loc="upper left")
    axes[2].plot(t, [s.get("reweighter_cache_bytes", 0) / 2**20 for s in soak.samples],
                 label="vector cache MB")  # fmt: skip
    axes[2].plot(t, [s.get("reweighter_word_cache_words", 0) / 1000 for s in soak.samples],
                 label="word cache (k words)")  # fmt: skip
    axes[2].plot(t, [s["load1"] for s in soak.samples], label="load average (1 min)")
    axes[2].legend(loc="upper left")
    m = [r["minute"] - 0.5 for r in rows if r["p99_ms"] is not None]
    axes[3].plot(m, [r["p50_ms"] for r in rows if r["p99_ms"] is not None], "o-", label="p50")
    axes[3].plot(m, [r["p99_ms"] for r in rows if r["p99_ms"] is not None], "s-", label="p99")
    axes[3].set_ylabel("ms (reweight, embeddings)")
    axes[3].set_xlabel("minutes")
    axes[3].legend(loc="upper left")
    for ax in axes:
        for name, x in soak.marks.items():
            if name != "redis_up":
                ax.axvline(x / 60, color="grey", ls=":")
        ax.axvspan(0, soak.args.minutes * soak.args.warmup, color="grey", alpha=0.1)
    axes[0].set_title("soak: mixed traffic (dotted: key rotation, Redis restart; grey: warm-up)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=1 / 3, help="share of the run before checks")
    ap.add_argument("--pace-s", type=float, default=0.2, help="each client's pause between calls")
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--verify-every", type=int, default=10)
    ap.add_argument("--redis-down-s", type=float, default=5.0)
    ap.add_argument("--max-rss-slope", type=float, default=1.0, help="MB/min after the warm-up")
    ap.add_argument("--fd-slack", type=int, default=10)
    ap.add_argument("--thread-slack", type=int, default=2)
    ap.add_argument("--p99-factor", type=float, default=2.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT / "soak.json",
                    help="the JSON file (a folder: soak.json in it); beside it .png, .serve.log")
    args = ap.parse_args()
    if args.out.is_dir():  # a folder given: the run's files go in it
        args.out = args.out / "soak.json"
    try:  # refused now, not after the run
        args.out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        ap.error(f"--out {args.out}: {e}")
    if not os.access(args.out.parent, os.W_OK):
        ap.error(f"--out {args.out}: its folder is not writable")
    import torch

    torch.set_num_threads(1)  # the fresh computation here must not starve the server
    workdir = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    tenants = workdir / "tenants.json"
    write_tenants(tenants, KEYS)
    redis = Redis(workdir)
    redis.start()
    try:
        served = serve("--compile", "off", "--tenants", str(tenants), timeout=300, settings={
            "redis_url": redis.url, "cache_max_bytes": 8 * 2**20, "word_cache": 4096})  # fmt: skip
        try:
            soak = Soak(args, served, redis, tenants)
            asyncio.run(soak.run())
            alive = served.proc.poll() is None
        finally:
            served.stop()
            log = served.log()
            served.log_path.unlink(missing_ok=True)
    finally:
        redis.stop()
    rows = minutes_table(soak)
    fails, summary = verdict(soak, rows)
    if not alive:
        fails.append(f"the server died during the run: {log[-2000:]}")
    print_table(rows, summary, soak)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    png = args.out.with_suffix(".png")
    plot(soak, rows, png)
    args.out.write_text(json.dumps({
        "args": {**vars(args), "out": str(args.out)}, "rows": rows, "summary": summary,
        "samples": soak.samples, "wrong": soak.wrong, "fails": fails,
        "errors": [e for e in soak.events if e[3] != "ok"],
        "machine": {"node": platform.node(), "cores": os.cpu_count()},
    }, indent=1, default=str))  # fmt: skip
    print(f"\nwrote {args.out} and {png}")
    if fails:  # the server's log beside the results, for the diagnosis
        args.out.with_suffix(".serve.log").write_text(log)
        print("SOAK FAILED:\n- " + "\n- ".join(fails))
        return 1
    print("SOAK PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
