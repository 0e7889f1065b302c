"""Trainer fixtures: a live `reweighter serve` on loopback, the tiny model, the fake vLLM server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reweighter.launch import serve, stop, wait_http
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
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


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
