"""`reweighter serve` as a child process on loopback, as an attacker or a heavy user sees it.

A child (not a BackgroundService) so that floods, signals and RSS belong to the service alone
and the load generator does not share its interpreter. Settings go in as REWEIGHTER_* variables:
an unknown variable is ignored, so a test of a limit that does not exist yet fails on behaviour,
not on start-up.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

API_KEY = "hardening-key"
AUTH = {"authorization": f"Bearer {API_KEY}"}
_PORTS = re.compile(r"HTTP on \S+?:(\d+) and gRPC on \S+?:(\d+)")


@dataclass
class Served:
    """One `reweighter serve` child: its URLs, its log, and a way to stop it."""

    proc: subprocess.Popen
    log_path: Path
    http_port: int = 0
    grpc_port: int = 0
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def _child_setup(nofile: int | None) -> None:
    """In the child: die with the test process (no orphans after a killed run); cap files."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def start_serve(
    *flags: str,
    timeout: float = 120.0,
    nofile: int | None = None,
    ready: bool = True,
    **env: str | int | float,
) -> Served:
    """Start `reweighter serve` on free loopback ports; return once /readyz says ready (or,
    with ready=False, once /healthz answers: tests of the transport need no model).

    `nofile` caps the child's open files (RLIMIT_NOFILE), as a small container would."""
    child_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    child_env.pop("REDIS_URL", None)
    child_env.update({f"REWEIGHTER_{k.upper()}": str(v) for k, v in env.items()})
    log = Path(tempfile.mkstemp(prefix="reweighter-hardening-", suffix=".log")[1])
    cmd = [sys.executable, "-m", "reweighter", "serve", "--host", "127.0.0.1"]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--log-level", "info", *flags]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env,
            preexec_fn=lambda: _child_setup(nofile),
        )
    served = Served(proc, log, env={k: str(v) for k, v in env.items()})
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}:\n{served.log()[-3000:]}")
            m = _PORTS.search(served.log())
            if m and not served.http_port:
                served.http_port, served.grpc_port = int(m[1]), int(m[2])
            if served.http_port:
                try:
                    probe = "/readyz" if ready else "/healthz"
                    if httpx.get(served.url + probe, timeout=2).status_code == 200:
                        return served
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise TimeoutError(f"serve not ready in {timeout} s:\n{served.log()[-3000:]}")
    except BaseException:
        served.stop()
        raise


class PrivateRedis:
    """A password-protected redis-server on a free loopback port; stop() and start() again on
    the same port simulate an outage and a recovery."""

    password = "s3cret-hardening-pw"

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed")
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        args += ["no", "--requirepass", self.password]
        self.proc = subprocess.Popen([exe, *args], stdout=subprocess.DEVNULL)
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=0.5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return self
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# Small enough that a max-size request encodes in seconds here (the fairness test sends one).
KEYED_MAX_CHARS = 30_000
KEYED_MAX_COMPLETIONS = 512  # with max_chars, a body limit of ~14 MB
KEYED_GRACE_S = 2.0
KEYED_NOFILE = 256
KEYED_TIMEOUT_S = 2.0


@pytest.fixture(scope="package")
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis().start()
    yield server
    server.stop()


def _start_keyed(redis: PrivateRedis) -> Served:
    return start_serve(
        "--shutdown-grace",
        str(KEYED_GRACE_S),
        nofile=KEYED_NOFILE,
        api_key=API_KEY,
        max_chars=KEYED_MAX_CHARS,
        max_completions=KEYED_MAX_COMPLETIONS,
        redis_url=redis.url,
        header_timeout_s=KEYED_TIMEOUT_S,
        body_timeout_s=KEYED_TIMEOUT_S,
        keepalive_timeout_s=KEYED_TIMEOUT_S,
        compile="off",  # no background compile competing for the CPU and the descriptors
        # fuzzed members of a group that never fills (/v1/groups, /v1/openrlhf) wait this long
        assembly_max_timeout_s=3,
    )


@pytest.fixture(scope="package")
def _keyed_holder(private_redis: PrivateRedis) -> Iterator[dict[str, Served]]:
    holder: dict[str, Served] = {}
    yield holder
    if "served" in holder:
        holder["served"].stop()
        holder["served"].log_path.unlink(missing_ok=True)


@pytest.fixture
def keyed(_keyed_holder: dict[str, Served], private_redis: PrivateRedis) -> Served:
    """One shared `reweighter serve` for the whole package (starting one costs 10-40 s on this
    machine): an API key, a password-protected private Redis, 2 s read deadlines, 256 file
    descriptors, the eager encoder, small request limits and a 2 s shutdown grace. A test
    that stops it (marked `stops_service`, run last) leaves the next user a fresh one."""
    served = _keyed_holder.get("served")
    if served is None or served.proc.poll() is not None:
        if served is not None:
            served.log_path.unlink(missing_ok=True)
        served = _keyed_holder["served"] = _start_keyed(private_redis)
    return served


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stops_service: stops the shared service; runs last")
    config.addinivalue_line("markers", "leaves_work: leaves the encoder busy; runs late")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that leave the encoder busy run late, and tests that stop the shared service
    last, among this package's tests (the other packages' order is left alone)."""
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if here in Path(item.path).parents]
    ours = sorted(
        (items[i] for i in slots),
        key=lambda item: (
            item.get_closest_marker("stops_service") is not None,
            item.get_closest_marker("leaves_work") is not None,
        ),
    )
    for i, item in zip(slots, ours, strict=True):
        items[i] = item


def error_shape(body: object) -> dict:
    """The documented error body {error: {message, field, type}}; fails the test otherwise."""
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"message", "field", "type"}, body
    assert isinstance(err["message"], str) and err["message"], body
    assert err["field"] is None or isinstance(err["field"], str), body
    assert isinstance(err["type"], str), body
    return err
