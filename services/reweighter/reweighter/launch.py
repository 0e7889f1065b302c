"""`reweighter serve` as a child process, exactly what a user runs: started on free loopback
ports, waited on until ready, stopped. The one launcher of the demo, the tests and the benchmarks.

The ports are the ones serve reports binding (it is started with port 0 and `--log-level info`),
so two launchers on one machine never race for a port. The child's output goes to a log file
(`Served.log()`); on Linux it dies with its parent, so a killed run leaves no orphan.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

_PORTS = re.compile(r"HTTP on \S+?:(\d+) and gRPC on \S+?:(\d+)")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
"""The bundled model needs no hub: a child never tries to reach one."""


@dataclass
class Served:
    """One `reweighter serve` child: its URLs, its log, and a way to stop it."""

    proc: subprocess.Popen
    log_path: Path
    http_port: int = 0
    grpc_port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    """The REWEIGHTER_* settings it was started with."""
    ca_file: str | None = None
    """Served over TLS (--tls-cert-file): the roots its clients trust; url is then https."""

    @property
    def url(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://127.0.0.1:{self.http_port}"

    @property
    def target(self) -> str:
        """The gRPC target (host:port)."""
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self, timeout: float = 20.0) -> int | None:
        return stop(self.proc, timeout)

    def close(self) -> None:
        """Stop it and delete its log."""
        self.stop()
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> int | None:
    """SIGTERM (a graceful stop), then SIGKILL after `timeout` s; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    """Until GET `url` answers 200 (any child server: serve, a fake vLLM, a rival); raises if
    the child exits first or `timeout` s pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer in {timeout:.0f} s")


def _child_setup(nofile: int | None) -> Callable[[], None]:
    def setup() -> None:
        with contextlib.suppress(OSError, AttributeError):  # Linux: die with the parent
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if nofile:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return setup


def serve(
    *flags: str,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 180.0,
    ready: bool = True,
    nofile: int | None = None,
    ca_file: str | None = None,
) -> Served:
    """Start `reweighter serve` on free loopback ports with `flags`; return once /readyz says
    ready (with ready=False, once /healthz answers: the transport without the model).

    `settings` go in as REWEIGHTER_<NAME> variables (an unknown one is ignored, as for a user);
    `env` replaces the inherited environment (default: this process's, with the hub offline and
    REDIS_URL unset: pass it in `settings` as redis_url). `nofile` caps the child's open files
    (RLIMIT_NOFILE), as a small container would. `ca_file`: for flags that turn TLS on
    (--tls-cert-file, --tls-key-file), it is probed over https trusting this file. Raises with
    the log's tail when serve exits or is not ready in `timeout` s."""
    child_env = dict(os.environ if env is None else env)
    child_env.update(OFFLINE)
    if env is None:
        child_env.pop("REDIS_URL", None)
    given = {f"REWEIGHTER_{k.upper()}": str(v) for k, v in (settings or {}).items()}
    child_env.update(given)
    fd, name = tempfile.mkstemp(prefix="reweighter-serve-", suffix=".log")
    os.close(fd)
    log_path = Path(name)
    cmd = [sys.executable, "-m", "reweighter", "serve", "--host", "127.0.0.1"]
    cmd += ["--http-port", "0", "--grpc-port", "0", "--log-level", "info", *flags]
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env,
            preexec_fn=_child_setup(nofile),
        )  # fmt: skip
    served = Served(proc, log_path, env=given, ca_file=ca_file)
    verify: Any = True
    if ca_file is not None:
        from .tls import http_ssl_context

        verify = http_ssl_context(ca_file)
    deadline = time.monotonic() + timeout
    probe = "/readyz" if ready else "/healthz"
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}:\n{served.log()[-3000:]}")
            if not served.http_port and (m := _PORTS.search(served.log())):
                served.http_port, served.grpc_port = int(m[1]), int(m[2])
            if served.http_port:
                with contextlib.suppress(httpx.HTTPError):
                    answer = httpx.get(served.url + probe, timeout=2, verify=verify)
                    if answer.status_code == 200:
                        return served
            time.sleep(0.1)
        raise TimeoutError(f"serve not ready in {timeout:.0f} s:\n{served.log()[-3000:]}")
    except BaseException:
        served.close()
        raise
