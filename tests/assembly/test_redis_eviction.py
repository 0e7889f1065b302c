"""State is never evicted as if it were cache (issue 51, item 3): the Redis settings the project
ships, read from docker-compose.yml and deploy/k8s/base (not copied here), keep the embedding
cache and the state apart, so a cache filled past `maxmemory` loses no group, OpenRLHF round or
answer-memory entry; with the settings shipped before (one Redis, `allkeys-lru`, both in it) the
same run loses them. And a full state Redis (`noeviction`) is the documented 503, never a number.

Each case starts one redis-server per Redis the files declare, with exactly their arguments
except `maxmemory`, which is divided by `SCALE` for every instance alike (1gb -> 8 MiB): the
cache fills past it in well under a second instead of writing a gigabyte on a shared machine.
The service is a real one on loopback (HTTP), its engine on the same settings (the answer memory
and the embedding cache are the engine's), with the bundled model for the OpenRLHF texts.
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
import subprocess
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest
import redis
import yaml
from conftest import _redis_ping, free_port

from reweighter.client import AsyncReweighterClient, RetryPolicy, ReweighterClient
from reweighter.embedding import build_cache
from reweighter.engine import ReweightEngine
from reweighter.server import BackgroundService
from reweighter.types import Group, ReweightRequest

from .conftest import settings

REPO = Path(__file__).resolve().parents[2]
SCALE = 128
"""Every instance's maxmemory is divided by this (1gb -> 8 MiB), see the module docstring."""
G = 4  # members per group
GROUPS = 12  # groups with G - 1 members waiting while the cache fills
PROMPTS = 4  # OpenRLHF prompts with one of their n = 2 samples waiting
WAIT_S = 20.0  # how long the waiting members wait (their timeout_s)
NO_RETRY = RetryPolicy(retries=0)

# What docker-compose.yml and deploy/k8s/base/redis.yaml shipped before this change: one Redis,
# an LRU over every key, and REDIS_URL for everything.
OLD = {"redis": ["--save", "", "--appendonly", "no", "--maxmemory", "1gb",
                 "--maxmemory-policy", "allkeys-lru"]}  # fmt: skip


@dataclass
class Wiring:
    """What a deployment declares: each Redis (host name -> redis-server arguments) and which
    of them the service uses for state (REDIS_URL) and for the embedding cache."""

    servers: dict[str, list[str]]
    state: str
    cache: str


def _default(value: str) -> str:
    """Compose's `${VAR:-default}` with nothing set (no .env): the default."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def compose_wiring() -> Wiring:
    spec = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    env = spec["services"]["reweighter"]["environment"]
    servers = {
        name: [_default(str(a)) for a in svc["command"][1:]]
        for name, svc in spec["services"].items()
        if svc.get("command") and svc["command"][0] == "redis-server"
    }
    state = urlparse(env["REDIS_URL"]).hostname
    cache = urlparse(env.get("REWEIGHTER_CACHE_REDIS_URL") or env["REDIS_URL"]).hostname
    return Wiring(servers, state, cache)


def k8s_wiring() -> Wiring:
    base = REPO / "deploy" / "k8s" / "base"
    docs = [d for d in yaml.safe_load_all((base / "redis.yaml").read_text()) if d]
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    servers = {}
    for svc in (d for d in docs if d["kind"] == "Service"):
        selector = svc["spec"]["selector"]
        (dep,) = [
            d for d in deployments.values()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]  # fmt: skip
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        assert container["args"][0] == "redis-server"
        servers[svc["metadata"]["name"]] = [str(a) for a in container["args"][1:]]
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    (config,) = [c for c in kustomization["configMapGenerator"] if c["name"] == "reweighter-config"]
    env = dict(line.split("=", 1) for line in config["literals"])
    state = urlparse(env["REDIS_URL"]).hostname
    cache = urlparse(env.get("REWEIGHTER_CACHE_REDIS_URL") or env["REDIS_URL"]).hostname
    return Wiring(servers, state, cache)


def old_wiring() -> Wiring:
    return Wiring(dict(OLD), "redis", "redis")


def _bytes(size: str) -> int:
    """Redis's memory units (1gb = 1024^3, 1g = 1000^3)."""
    m = re.fullmatch(r"(\d+)(b|k|kb|m|mb|g|gb)?", size.lower())
    assert m, size
    unit = {None: 1, "b": 1, "k": 1000, "kb": 1024, "m": 10**6, "mb": 2**20, "g": 10**9,
            "gb": 2**30}[m.group(2)]  # fmt: skip
    return int(m.group(1)) * unit


def _option(args: list[str], name: str) -> str:
    return args[args.index(f"--{name}") + 1]


class Servers:
    """One redis-server per declared Redis, with its declared arguments (maxmemory / SCALE)."""

    def __init__(self, wiring: Wiring) -> None:
        self.wiring = wiring
        self.procs: list[subprocess.Popen] = []
        self.urls: dict[str, str] = {}

    def start(self) -> Servers:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed")
        for host, args in self.wiring.servers.items():
            args = list(args)
            i = args.index("--maxmemory") + 1
            args[i] = str(_bytes(args[i]) // SCALE)
            port = free_port()
            self.procs.append(
                subprocess.Popen(
                    [exe, *args, "--port", str(port), "--bind", "127.0.0.1", "--daemonize", "no"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
            self.urls[host] = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        for url in self.urls.values():
            while not _redis_ping(url):
                assert time.monotonic() < deadline, f"redis-server at {url} did not start"
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    def client(self, host: str) -> redis.Redis:
        return redis.Redis.from_url(self.urls[host])


@pytest.fixture
def deployment(request: pytest.FixtureRequest) -> Iterator[tuple[Servers, BackgroundService]]:
    """The Redis servers of `request.param` (a Wiring) and a service wired to them."""
    servers = Servers(request.param).start()
    w = servers.wiring
    s = settings(
        redis_url=servers.urls[w.state],
        cache_redis_url=servers.urls[w.cache],
        openrlhf_n=2,
        openrlhf_timeout_s=WAIT_S,
    )
    engine = ReweightEngine(s)
    engine.load()
    service = BackgroundService(s, engine).start()
    try:
        yield servers, service
    finally:
        service.stop()
        engine.close()
        servers.stop()


def test_the_shipped_files_keep_state_and_cache_apart() -> None:
    """The wiring itself, before any run: in both deployments the state is on a `noeviction`
    Redis that holds no cache, and the cache evicts on an instance of its own."""
    for wiring in (compose_wiring(), k8s_wiring()):
        assert wiring.state != wiring.cache
        state, cache = wiring.servers[wiring.state], wiring.servers[wiring.cache]
        assert _option(state, "maxmemory-policy") == "noeviction"
        assert _option(cache, "maxmemory-policy") == "allkeys-lru"
        assert _bytes(_option(cache, "maxmemory")) > 0 and _bytes(_option(state, "maxmemory")) > 0


def _member(gid: str, mid: str, reward: float, timeout_s: float) -> dict[str, Any]:
    rng = np.random.default_rng(zlib.crc32(f"{gid}/{mid}".encode()))
    return {
        "group_id": gid, "member_id": mid, "group_size": G, "reward": reward,
        "embedding": rng.normal(size=8).tolist(), "method": "dra", "advantages": "grpo",
        "timeout_s": timeout_s,
    }  # fmt: skip


def _memory_request(key: str, step: int, answers: list[str | None]) -> ReweightRequest:
    n = len(answers)
    group = Group([0.0] * n, embeddings=[[1.0, float(i)] for i in range(n)], answers=answers,
                  prompt_key=key)  # fmt: skip
    return ReweightRequest([group], "outcome_ucb", {"scale": 1.0, "baseline": None}, step=step)


def _fill_cache(servers: Servers, service: BackgroundService) -> int:
    """Write vectors through the service's own cache class and settings until three times the
    cache Redis's maxmemory has gone in; returns how many."""
    cache = build_cache(service.settings.model_copy(update={"cache_max_bytes": 0}))
    assert cache is not None
    limit = int(servers.client(servers.wiring.cache).config_get("maxmemory")["maxmemory"])
    vec = np.arange(384, dtype=np.float32)
    n, batch = 0, 512
    try:
        while n * vec.nbytes < 3 * limit:
            cache.set_many({f"fill:{uuid.uuid4().hex}": vec for _ in range(batch)})
            n += batch
        assert cache.errors == 0, "the cache Redis refused writes"
    finally:
        cache.close()
    return n


async def _run(servers: Servers, service: BackgroundService) -> dict[str, Any]:
    """Open groups, OpenRLHF rounds and memory entries; fill the cache; then complete them."""
    url = service.http_url
    tag = uuid.uuid4().hex[:8]
    groups = [[_member(f"g-{tag}-{i}", str(m), float(m % 2), WAIT_S) for m in range(G)]
              for i in range(GROUPS)]  # fmt: skip
    prompts = [f"What is {i} + {i}? {tag}" for i in range(PROMPTS)]
    state = servers.client(servers.wiring.state)
    prefix = service.settings.assembly_prefix
    memory_key = f"memory-{tag}"
    out: dict[str, Any] = {}
    async with (
        AsyncReweighterClient(url, retry=NO_RETRY) as client,
        httpx.AsyncClient(base_url=url, timeout=WAIT_S + 30) as raw,
    ):

        async def openrlhf(prompt: str, answer: str) -> dict[str, Any]:
            body = {
                "query": [prompt + " " + answer],
                "prompts": [prompt],
                "labels": ["#### " + answer],
            }
            r = await raw.post("/v1/openrlhf/reward", json=body)
            assert r.status_code == 200, r.text
            return r.json()

        # the answer memory: two steps of one prompt (its second step counts the first's)
        step1 = await client.reweight(_memory_request(memory_key, 1, ["a", "a", None]))
        assert step1.groups[0].rewards == [1.0, 1.0, 0.0]
        step2 = await client.reweight(_memory_request(memory_key, 2, ["a", "b"]))
        assert step2.groups[0].rewards == pytest.approx([1 / math.sqrt(2), 1.0])
        # waiting: G - 1 members of every group, one sample of every OpenRLHF prompt
        waiting = [asyncio.create_task(client.submit_member(**m)) for g in groups for m in g[:-1]]
        waiting += [asyncio.create_task(openrlhf(p, "0")) for p in prompts]
        held = GROUPS * (G - 1) + PROMPTS
        deadline = time.monotonic() + WAIT_S / 2
        while int(state.get(f"{prefix}held") or 0) < held:
            assert time.monotonic() < deadline, "the members never reached the store"
            await asyncio.sleep(0.05)
        out["state_keys_before"] = sum(1 for _ in state.scan_iter(match=f"{prefix}*"))
        out["filled"] = await asyncio.to_thread(_fill_cache, servers, service)
        out["state_keys_after"] = sum(1 for _ in state.scan_iter(match=f"{prefix}*"))
        # the last member of every group, the second sample of every prompt: short waits, so a
        # lost group (reopened by its last member) answers short at once instead of in WAIT_S
        last = [asyncio.create_task(client.submit_member(**{**g[-1], "timeout_s": 3.0}))
                for g in groups]  # fmt: skip
        last += [asyncio.create_task(openrlhf(p, "1")) for p in prompts]
        # an exception is an answer too (a lost group's waiting members get a 503: "answered
        # without member ...; send it again")
        out["last"] = await asyncio.gather(*last, return_exceptions=True)
        out["waiting"] = await asyncio.gather(*waiting, return_exceptions=True)
        out["memory_retry"] = await client.reweight(_memory_request(memory_key, 2, ["a", "b"]))
        out["memory_step2"] = step2
    out["groups"] = groups
    return out


def _expected(url: str, groups: list[list[dict[str, Any]]]) -> dict[tuple[str, str], float]:
    """/v1/reweight on each whole group in member_id order: what every member must get."""
    want = {}
    with ReweighterClient(url, retry=NO_RETRY) as http:
        for g in groups:
            ms = sorted(g, key=lambda m: m["member_id"])
            group = Group([m["reward"] for m in ms], embeddings=[m["embedding"] for m in ms])
            res = http.reweight(ReweightRequest([group], "dra", {}, "grpo")).groups[0]
            for i, m in enumerate(ms):
                want[(m["group_id"], m["member_id"])] = res.rewards[i]
    return want


@pytest.mark.parametrize(
    "deployment",
    [
        pytest.param(compose_wiring(), id="docker-compose.yml"),
        pytest.param(k8s_wiring(), id="k8s-base"),
    ],
    indirect=True,
)
def test_a_full_cache_loses_no_state(deployment: tuple[Servers, BackgroundService]) -> None:
    servers, service = deployment
    out = asyncio.run(_run(servers, service))
    cache_info = servers.client(servers.wiring.cache).info("stats")
    state_info = servers.client(servers.wiring.state).info("stats")
    assert cache_info["evicted_keys"] > 0, "the cache never filled past its maxmemory"
    assert state_info["evicted_keys"] == 0
    assert out["state_keys_after"] >= out["state_keys_before"]
    want = _expected(service.http_url, out["groups"])
    members = [*out["last"][:GROUPS], *out["waiting"][: GROUPS * (G - 1)]]
    assert len(members) == len(want)
    for res in members:
        assert not isinstance(res, BaseException), res
        assert res.complete and res.members == G, res
        assert res.reward == pytest.approx(want[(res.group_id, res.member_id)], abs=1e-6)
    samples = [*out["last"][GROUPS:], *out["waiting"][GROUPS * (G - 1) :]]
    for body in samples:
        assert not isinstance(body, BaseException), body
        assert body["extra_logs"]["reweighted"] == [1.0], body
    # the retried step 2 found step 1 in the memory: the identical answer
    assert out["memory_retry"].groups[0].rewards == pytest.approx(
        out["memory_step2"].groups[0].rewards
    )


@pytest.mark.slow  # the lost groups' waiting members answer only at their deadline (WAIT_S)
@pytest.mark.parametrize("deployment", [pytest.param(old_wiring(), id="old")], indirect=True)
def test_the_old_settings_lose_state(deployment: tuple[Servers, BackgroundService]) -> None:
    """The same run on the settings shipped before: the cache's LRU evicts the state."""
    servers, service = deployment
    out = asyncio.run(_run(servers, service))
    assert servers.client(servers.wiring.state).info("stats")["evicted_keys"] > 0
    assert out["state_keys_after"] < out["state_keys_before"]
    members = [*out["last"][:GROUPS], *out["waiting"][: GROUPS * (G - 1)]]
    samples = [*out["last"][GROUPS:], *out["waiting"][GROUPS * (G - 1) :]]
    lost = [r for r in members if isinstance(r, BaseException) or not r.complete]
    short = [
        b for b in samples if isinstance(b, BaseException) or b["extra_logs"]["reweighted"] != [1.0]
    ]
    wrong_memory = out["memory_retry"].groups[0].rewards != pytest.approx(
        out["memory_step2"].groups[0].rewards
    )
    assert lost and short and wrong_memory, (len(lost), len(short), wrong_memory)


@pytest.mark.parametrize("deployment", [pytest.param(compose_wiring(), id="compose")],
                         indirect=True)  # fmt: skip
def test_a_full_state_redis_is_a_503(deployment: tuple[Servers, BackgroundService]) -> None:
    """`noeviction` and full: writes fail with OOM, and the service says so (503 naming the
    store), for a member and for the answer memory; never an answer computed without them."""
    servers, service = deployment
    servers.client(servers.wiring.state).config_set("maxmemory", "1")  # anything used is over
    url = service.http_url
    member = _member(f"full-{uuid.uuid4().hex[:8]}", "0", 1.0, 5.0)
    gid = member.pop("group_id")
    r = httpx.post(f"{url}/v1/groups/{gid}/members", json=member, timeout=30)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "StoreUnavailable" and "maxmemory" in r.text, r.text
    memory = {"method": "outcome_ucb", "params": {"scale": 1.0, "baseline": None}, "step": 1,
              "groups": [{"rewards": [0.0, 0.0], "embeddings": [[1.0, 0.0], [0.0, 1.0]],
                          "answers": ["a", "b"], "prompt_key": "full"}]}  # fmt: skip
    r = httpx.post(f"{url}/v1/reweight", json=memory, timeout=30)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "MemoryUnavailable", r.text


@pytest.mark.parametrize(
    ("wiring", "warned"),
    [
        pytest.param(compose_wiring(), False, id="docker-compose.yml"),
        pytest.param(k8s_wiring(), False, id="k8s-base"),
        pytest.param(old_wiring(), True, id="old"),
    ],
)
def test_a_state_redis_that_evicts_is_warned_about(
    wiring: Wiring, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The one-Redis setup (REWEIGHTER_CACHE_REDIS_URL unset) with an evicting policy is the
    old risk: the assembly store says so once at start, where the operator looks."""
    from reweighter.assembly import make_store

    servers = Servers(wiring).start()
    try:

        async def start_and_stop() -> None:
            store = make_store(settings(redis_url=servers.urls[wiring.state]))
            await store.start(lambda gid, rnd: None)
            # the check runs first in the store's listener, before it subscribes: subscribed,
            # it has run
            probe = servers.client(wiring.state)
            deadline = time.monotonic() + 10
            while not dict(probe.pubsub_numsub(store.channel)).get(store.channel.encode()):
                assert time.monotonic() < deadline, "the assembly store never subscribed"
                await asyncio.sleep(0.02)
            await store.aclose()

        with caplog.at_level("WARNING", logger="reweighter.redis_client"):
            asyncio.run(start_and_stop())
    finally:
        servers.stop()
    said = [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert bool(said) == warned, said
    if warned:
        assert "allkeys-lru" in said[0] and "REWEIGHTER_CACHE_REDIS_URL" in said[0]
