"""`reweighter serve` as a child process on loopback, as an attacker or a heavy user sees it.

A child (not a BackgroundService) so that floods, signals and RSS belong to the service alone
and the load generator does not share its interpreter. Settings go in as REWEIGHTER_* variables:
an unknown variable is ignored, so a test of a limit that does not exist yet fails on behaviour,
not on start-up.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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


def start_serve(*flags: str, timeout: float = 120.0, **env: str | int | float) -> Served:
    """Start `reweighter serve` on free loopback ports; return once /readyz says ready."""
    child_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    child_env.pop("REDIS_URL", None)
    child_env.update({f"REWEIGHTER_{k.upper()}": str(v) for k, v in env.items()})
    log = Path(tempfile.mkstemp(prefix="reweighter-hardening-", suffix=".log")[1])
    cmd = [sys.executable, "-m", "reweighter", "serve", "--host", "127.0.0.1"]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--log-level", "info", *flags]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env)
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
                    if httpx.get(f"{served.url}/readyz", timeout=2).status_code == 200:
                        return served
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise TimeoutError(f"serve not ready in {timeout} s:\n{served.log()[-3000:]}")
    except BaseException:
        served.stop()
        raise


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    """A factory for `reweighter serve` children, all stopped at the end of the test."""
    started: list[Served] = []

    def make(*flags: str, **env: str | int | float) -> Served:
        started.append(start_serve(*flags, **env))
        return started[-1]

    yield make
    for s in started:
        s.stop()
        s.log_path.unlink(missing_ok=True)


@pytest.fixture(scope="package")
def keyed() -> Iterator[Served]:
    """One shared service with an API key, for the tests that only send requests."""
    served = start_serve(api_key=API_KEY)
    yield served
    served.stop()
    served.log_path.unlink(missing_ok=True)


def error_shape(body: object) -> dict:
    """The documented error body {error: {message, field, type}}; fails the test otherwise."""
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"message", "field", "type"}, body
    assert isinstance(err["message"], str) and err["message"], body
    assert err["field"] is None or isinstance(err["field"], str), body
    assert isinstance(err["type"], str), body
    return err
