"""Shared fixtures: real Redis (the machine's or our own), free loopback ports, offline hub."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the fixtures import what they use: importing this file loads no engine
    from reweighter.client import ReweighterClient
    from reweighter.config import Settings
    from reweighter.engine import ReweightEngine
    from reweighter.service import BackgroundService

# Nothing may load weights or data from a hub at run time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The suite runs the eager encoder: a background torch.compile per test service would burn
# the shared CPU for a minute each (tests that want it ask for compile="on"/"auto").
os.environ.setdefault("REWEIGHTER_COMPILE", "off")


# -- what is slow, and why (the markers pyproject declares) -----------------------------------
# `bash scripts/test.sh --fast` is `pytest -m "not slow"`. A test is marked by a kind that says
# why it is slow; every kind implies `slow`. Fixtures that make a test slow mark it here, so a new
# test that uses one is marked without anyone remembering to.
KINDS = ("server", "docker", "vllm", "trainer", "venv", "process", "browser", "ray")
FIXTURE_KINDS = {
    "browser": "browser",  # tests/service/test_dashboard.py: headless Chromium via Selenium
    "private_redis": "server",  # tests/hardening: its `reweighter serve` children use it
    "reweighter_service": "server",  # tests/trainer: a `reweighter serve` child
    "int8_url": "server",  # tests/service/test_precision.py: `reweighter serve --precision int8`
    "run_cli": "trainer",  # reweighter-train on the smoke config
    "fake_vllm": "trainer",  # the fake vLLM server with the tiny model
    "smollm2_dir": "trainer",  # tests/trainer/test_policy.py: converts SmolLM2-135M (20 s)
    "ray_serve": "ray",  # tests/deploy/test_deploy_ray.py: a 2-node Ray cluster, Serve replicas
}
SLOW_TIMEOUT_S = 3600  # pytest-timeout for a slow test; pyproject's `timeout` for the others
# An unmarked test whose call takes longer than this fails: the fast loop stays fast. Every
# unmarked test took under 3.5 s at load 3 on 2 cores (2026-11-27); the limit leaves room for a
# busier machine, and REWEIGHTER_UNMARKED_LIMIT_S moves it (0 turns the guard off).
UNMARKED_LIMIT_S = float(os.environ.get("REWEIGHTER_UNMARKED_LIMIT_S", "10"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, kind in FIXTURE_KINDS.items():
            if fixture in names:
                item.add_marker(kind)
        if any(item.get_closest_marker(kind) for kind in KINDS):
            item.add_marker("slow")
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Fail an unmarked test that took longer than UNMARKED_LIMIT_S (its call, not its fixtures)."""
    outcome = yield
    report = outcome.get_result()
    if (
        report.when == "call"
        and report.passed
        and UNMARKED_LIMIT_S > 0
        and report.duration > UNMARKED_LIMIT_S
        and not item.get_closest_marker("slow")
    ):
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {report.duration:.1f} s without a slow marker (the limit for "
            f"an unmarked test is {UNMARKED_LIMIT_S:g} s): mark it slow, or with the kind that "
            f"says why (pyproject's markers: {', '.join(KINDS)}), or "
            "make it faster"
        )


@pytest.fixture(autouse=True)
def _models_in_setup(request: pytest.FixtureRequest) -> None:
    """Models a module's tests use, loaded or built in setup: the bundled MiniLM of
    tests/embedding (support.bundled_encoder, loaded once per session), and the model of the
    trainer config a module names in `MODEL_CONFIG` (`_config_model`). Why: the first test of
    such a module loaded it inside its own call, which the guard above times, and on a loaded
    machine that load alone passed the guard's limit. (Here, not in a tests/embedding/conftest.py:
    another conftest module would shadow this one for the tests that import `conftest` by name.)"""
    if hasattr(request.module, "fresh_view") or hasattr(request.module, "bundled_encoder"):
        from embedding.support import bundled_encoder

        bundled_encoder()  # cached: only the first test of the session pays the load
    config = getattr(request.module, "MODEL_CONFIG", None)
    if config is not None:
        _config_model(str(config))


@functools.cache
def _config_model(config: str) -> None:
    """Build or convert the model of the trainer config a module names in `MODEL_CONFIG`
    (reweighter_trainer.train.model_path: the tiny model built, SmolLM2's GGUF converted, each
    cached on disk on first use on a machine), by the fixture above, in setup. Why: a test that
    reads the config paid that first use inside its own call, which the guard above times:
    test_wordadd's first call took 39 s on a new machine (the conversion), 2 s after."""
    from reweighter_trainer.config import load_raw, parse
    from reweighter_trainer.train import model_path

    path = Path(config)
    if not path.is_absolute():  # relative to the repository
        path = Path(__file__).resolve().parents[1] / path
    model_path(parse(load_raw(path)))


class ServedApp:
    """An ASGI app (FastAPI) on uvicorn in a background thread, on a free loopback port: for
    tests that build an app of their own (`reweighter serve` children are reweighter.launch's)."""

    def __init__(self, app: object) -> None:
        import threading

        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServedApp:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def _redis_ping(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_timeout=0.5).ping())
    except Exception:
        return False


@dataclass
class RedisServer:
    """A private redis-server on a free loopback port, the one launcher of the suite: every test
    that needs a Redis of its own starts it here. `stop()` kills it (an outage), `start()` again
    brings it back on the same port; `password` makes it ask for one."""

    port: int
    password: str | None = None
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed")
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        args += ["no", "--daemonize", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(
            [exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if _redis_ping(self.url):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


def free_port() -> int:
    """reweighter.service.free_port, the one helper (tests, demo and benchmarks use it)."""
    from reweighter.service import free_port as free

    return free()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh private Redis for tests that stop or flush it."""
    server = RedisServer(free_port()).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_redis_url() -> Iterator[str]:
    """The machine's Redis at 127.0.0.1:6379 when it answers, else a private one."""
    url = "redis://127.0.0.1:6379/0"
    if _redis_ping(url):
        yield url
        return
    server = RedisServer(free_port()).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(name="free_port")
def free_port_fixture() -> int:
    return free_port()


# -- a real service on loopback (tests/service, tests/integrations) ----------------------------


def no_retry():  # noqa: ANN201 - a reweighter.client.RetryPolicy
    from reweighter.client import RetryPolicy

    return RetryPolicy(retries=0)


def loopback(**overrides: object) -> Settings:
    """Settings for a test service: loopback, free ports, no Redis unless asked (and no
    background compile: REWEIGHTER_COMPILE=off above)."""
    from reweighter.config import Settings

    base: dict[str, object] = {"host": "127.0.0.1", "http_port": 0, "grpc_port": 0}
    base.update(overrides)
    return Settings(**base)


@pytest.fixture(scope="session")
def engine() -> ReweightEngine:
    """The real engine on the bundled all-MiniLM-L6-v2, loaded once for the whole session: the
    one engine fixture of the suite."""
    from reweighter.engine import ReweightEngine

    eng = ReweightEngine(loopback())
    eng.load()
    return eng


@pytest.fixture(scope="module")
def service(engine: ReweightEngine) -> Iterator[BackgroundService]:
    from reweighter.service import BackgroundService

    with BackgroundService(loopback(), engine) as svc:
        yield svc


@pytest.fixture(scope="module")
def http(service: BackgroundService) -> Iterator[ReweighterClient]:
    from reweighter.client import ReweighterClient

    with ReweighterClient(service.http_url, retry=no_retry()) as client:
        yield client
