"""Trainer fixtures: a live `reweighter serve` on loopback, the tiny model, the fake vLLM server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from reweighter.launch import serve
from reweighter.service import free_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FAKES = REPO / "tests" / "fakes"
sys.path.insert(0, str(FAKES))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
    )
    return env


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Service:
    http_url: str
    grpc_target: str


@pytest.fixture(scope="session")
def reweighter_service() -> Iterator[Service]:
    """The real service (HTTP + gRPC, bundled model, CPU) as a child `reweighter serve`
    (reweighter.launch), shared by the session."""
    with serve("--device", "cpu", env=_env()) as served:
        yield Service(served.url, served.target)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from reweighter_trainer.tiny_model import tiny_model_path

    return tiny_model_path()


@pytest.fixture
def fake_vllm(tiny_model, tmp_path) -> Iterator[str]:
    port = free_port()
    with (tmp_path / "fake_vllm.log").open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(FAKES / "fake_vllm_serve.py"),
                "--model",
                str(tiny_model),
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(),
        )
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


SMOKE = REPO / "trainer" / "configs" / "smoke-cpu.yaml"


def _run_cli(args: list[str], *, launcher: list[str] | None = None, timeout: float = 300):
    cmd = (launcher or [str(BIN / "reweighter-train")]) + ["--config", str(SMOKE), *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=_env(), timeout=timeout, cwd=REPO
    )


@pytest.fixture
def run_cli():
    """reweighter-train (or a launcher + the module) on the smoke config, plus overrides."""
    return _run_cli
