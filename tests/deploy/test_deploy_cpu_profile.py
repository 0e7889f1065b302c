"""The compose `cpu` profile, run as plain processes: redis, `reweighter serve` and the trainer's
smoke run, each with the command and environment docker-compose.yml and the Dockerfiles give
it. Only what a container provides is translated: service names and container ports become
free loopback ports, volume mounts become temporary directories, the image's /opt/venv is this
venv. If the trainer finishes against the service, the wiring in the files is wiring that works.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml
from conftest import free_port
from deploy_support import REPO, Service, dockerfile, final_stage, image_env, load_compose
from prometheus_client.parser import text_string_to_metric_families

VENV_BIN = Path(sys.executable).parent
READY_TIMEOUT_S = 300
ROLLOUT_TIMEOUT_S = 600
TRAIN_TIMEOUT_S = 1200


class Translator:
    """Container addresses and paths -> this machine's loopback ports and temporary dirs."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ports: dict[tuple[str, int], int] = {}  # (compose host name, container port) -> port
        self.paths: dict[str, Path] = {}  # container mount point -> directory here

    def expose(self, svc: Service, container_port: int) -> int:
        port = free_port()
        for host in (svc.name, *svc.aliases):
            self.ports[(host, container_port)] = port
        return port

    def mount(self, svc: Service) -> None:
        for volume in svc.spec.get("volumes", []):
            source, target = volume.split(":")[:2]
            path = self.tmp / "volumes" / Path(source).name
            path.mkdir(parents=True, exist_ok=True)
            self.paths[target] = path

    def __call__(self, value: str) -> str:
        for (host, cport), port in self.ports.items():
            value = re.sub(rf"(?<![\w.-]){re.escape(host)}:{cport}\b", f"127.0.0.1:{port}", value)
        for target, path in self.paths.items():
            value = re.sub(rf"(?<![\w/]){re.escape(target)}(?=/|$)", str(path), value)
        return value


def image_command(svc: Service) -> list[str]:
    """ENTRYPOINT + (compose command, else the image's CMD), as the container would run it."""
    final = final_stage(dockerfile(REPO / svc.spec["build"]["dockerfile"]))
    entry = [i for i in final if i.keyword == "ENTRYPOINT"][-1].exec_form()
    cmd = svc.spec.get("command") or [i for i in final if i.keyword == "CMD"][-1].exec_form()
    exe = VENV_BIN / entry[0]
    assert exe.is_file(), f"{entry[0]}: the image's entrypoint is not a console script here"
    return [str(exe), *entry[1:], *cmd]


def image_entrypoint(svc: Service) -> list[str]:
    final = final_stage(dockerfile(REPO / svc.spec["build"]["dockerfile"]))
    return [i for i in final if i.keyword == "ENTRYPOINT"][-1].exec_form()


def rollout_venv_and_policy() -> tuple[Path, Path]:
    """`bash scripts/rollout-cpu.sh --setup` (cached): the rollout venv and the policy dir."""
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "rollout-cpu.sh"), "--setup"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    python, model = out.stdout.strip().splitlines()[-2:]
    return Path(python).parent.parent, Path(model)


def process_env(
    svc: Service, translate: Translator, home: Path, dotenv: dict[str, str]
) -> dict[str, str]:
    """The image's ENV, then compose's environment (pass-through keys from `dotenv`, as
    compose takes them from .env), translated; PATH leads to this venv."""
    build = svc.spec["build"]
    env = image_env(dockerfile(REPO / build["dockerfile"]), build.get("args", {}))
    env.update(svc.environment(outer=dotenv))
    env = {k: translate(v) for k, v in env.items()}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    env["HOME"] = str(home)
    return env


def wait_until(check, proc: subprocess.Popen, what: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        if check():
            return
        time.sleep(0.5)
    pytest.fail(f"{what} not healthy after {timeout}s:\n{log.read_text()[-4000:]}")


def healthcheck(svc: Service, env: dict[str, str], extra: list[str] | None = None) -> bool:
    """Run the service's compose healthcheck (`CMD` form) here; healthy means exit 0."""
    test = svc.spec["healthcheck"]["test"]
    assert test[0] == "CMD", test
    argv = [*test[1:], *(extra or [])]
    if argv[0] == "python":
        argv[0] = sys.executable  # the image's venv python
    try:
        return subprocess.run(argv, env=env, capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for proc in reversed(started):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        # The rollout server runs in a session of its own: what outlived it there (vLLM's
        # engine core, when the server was stopped while starting) goes with its group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def reweight_requests(metrics_text: str) -> float:
    wanted = {"transport": "http", "endpoint": "reweight", "status": "ok"}
    return sum(
        s.value
        for family in text_string_to_metric_families(metrics_text)
        for s in family.samples
        if s.name == "reweighter_requests_total" and wanted.items() <= s.labels.items()
    )


@pytest.mark.server
@pytest.mark.vllm
@pytest.mark.trainer
@pytest.mark.parametrize("dotenv", [{}, {"REWEIGHTER_API_KEY": "deploy-test-key"}],
                         ids=["defaults", "api-key"])  # fmt: skip
def test_cpu_profile_trains_against_the_service(
    tmp_path: Path, procs, dotenv: dict[str, str]
) -> None:
    """`dotenv` plays the user's .env: with REWEIGHTER_API_KEY set, the service must demand
    the key and the trainer must hold it, through compose's wiring alone."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    services = load_compose(dotenv).profile("cpu")
    assert set(services) == {"redis", "redis-cache", "reweighter", "rollout-cpu", "trainer-cpu"}
    redis_svc, rw_svc, ro_svc, tr_svc = (
        services[n] for n in ("redis", "reweighter", "rollout-cpu", "trainer-cpu")
    )
    translate = Translator(tmp_path)
    redis_port = translate.expose(redis_svc, 6379)
    # redis-cache (the embedding cache) on the same local redis: this test checks the wiring;
    # tests/assembly/test_redis_eviction.py starts both with compose's settings
    translate.ports[("redis-cache", 6379)] = redis_port
    http_port = translate.expose(rw_svc, 8080)
    grpc_port = translate.expose(rw_svc, 50051)
    rollout_port = translate.expose(ro_svc, 8000)
    for svc in services.values():
        translate.mount(svc)
    # The rollout image's venv and policy: what its two RUN lines make, made here by the same
    # script. Each CPU image converts the policy into its own /opt/policy at build time, with
    # the same code (policy.py): here both processes read the one converted directory.
    venv, policy = rollout_venv_and_policy()
    translate.paths["/opt/policy"] = policy.parent
    translate.paths["/opt/rollout-venv"] = venv
    home = tmp_path / "home"
    home.mkdir()

    # redis: compose's command, on a private loopback port.
    redis_log = tmp_path / "redis.log"
    argv = redis_svc.spec["command"]
    assert argv[0] == "redis-server"
    procs.append(
        subprocess.Popen(
            [shutil.which("redis-server"), *argv[1:], "--port", str(redis_port),
             "--bind", "127.0.0.1", "--daemonize", "no"],
            stdout=redis_log.open("w"), stderr=subprocess.STDOUT,
        )
    )  # fmt: skip
    redis_env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    wait_until(
        lambda: healthcheck(redis_svc, redis_env, ["-p", str(redis_port)]),
        procs[-1], "redis", redis_log, 30,
    )  # fmt: skip

    # reweighter: the image's ENTRYPOINT/CMD with the image's ENV and compose's environment.
    rw_env = process_env(rw_svc, translate, home, dotenv)
    assert rw_env["REWEIGHTER_HOST"] == "0.0.0.0" and rw_env["REWEIGHTER_DEVICE"] == "cpu"
    assert rw_env["REDIS_URL"] == f"redis://127.0.0.1:{redis_port}/0"
    # Containers listen on every interface; here only loopback, on the free ports.
    rw_env |= {
        "REWEIGHTER_HOST": "127.0.0.1",
        "REWEIGHTER_HTTP_PORT": str(http_port),
        "REWEIGHTER_GRPC_PORT": str(grpc_port),
    }
    rw_log = tmp_path / "reweighter.log"
    procs.append(
        subprocess.Popen(
            image_command(rw_svc), env=rw_env, cwd=home,
            stdout=rw_log.open("w"), stderr=subprocess.STDOUT,
        )
    )  # fmt: skip
    # `depends_on: condition: service_healthy`: the compose healthcheck itself decides.
    wait_until(
        lambda: healthcheck(rw_svc, rw_env), procs[-1], "reweighter", rw_log, READY_TIMEOUT_S
    )

    key = dotenv.get("REWEIGHTER_API_KEY")
    assert rw_env.get("REWEIGHTER_API_KEY") == key
    info = urllib.request.Request(f"http://127.0.0.1:{http_port}/v1/info")
    if key:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(info, timeout=10)
        assert refused.value.code == 401
    else:
        with urllib.request.urlopen(info, timeout=10) as resp:
            assert resp.status == 200

    # rollout-cpu: the image's ENTRYPOINT (services/rollout/entrypoint.sh) with its ENV and
    # compose's environment; healthy by compose's healthcheck, as trainer-cpu's depends_on says.
    ro_env = process_env(ro_svc, translate, home, dotenv)
    ro_env["PATH"] = f"{venv}/bin{os.pathsep}{os.environ['PATH']}"
    assert ro_env["DEVICE"] == "cpu" and ro_env["MODEL"] == str(policy)
    ro_env |= {"HOST": "127.0.0.1", "PORT": str(rollout_port)}
    ro_log = tmp_path / "rollout.log"
    entry = image_entrypoint(ro_svc)
    assert entry == ["bash", "/app/services/rollout/entrypoint.sh"]
    procs.append(
        subprocess.Popen(
            ["bash", str(REPO / "services/rollout/entrypoint.sh")], env=ro_env, cwd=home,
            stdout=ro_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
        )
    )  # fmt: skip
    wait_until(
        lambda: healthcheck(ro_svc, ro_env), procs[-1], "rollout-cpu", ro_log, ROLLOUT_TIMEOUT_S
    )

    # trainer: run in a copy of the image's WORKDIR (only what the image ships there).
    final = final_stage(dockerfile(REPO / tr_svc.spec["build"]["dockerfile"]))
    workdir = tmp_path / "app"
    for i in final:
        if i.keyword == "COPY" and "--from=" not in i.args:
            src, dest = i.args.split()
            image_workdir = [w.args for w in final if w.keyword == "WORKDIR"][-1]
            rel = Path(dest).relative_to(image_workdir)
            shutil.copytree(REPO / src, workdir / rel)
    tr_env = process_env(tr_svc, translate, home, dotenv)
    command = [translate(a) for a in image_command(tr_svc)]
    assert f"reweighter.url=http://127.0.0.1:{http_port}" in command
    tr_log = tmp_path / "trainer.log"
    with tr_log.open("w") as out:
        result = subprocess.run(
            command, env=tr_env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
            timeout=TRAIN_TIMEOUT_S,
        )  # fmt: skip
    assert result.returncode == 0, f"trainer failed:\n{tr_log.read_text()[-6000:]}"

    # It trained against this service: its summary, the service's counters, the shared cache.
    output_dir = Path(next(a for a in command if a.startswith("output_dir=")).split("=", 1)[1])
    assert output_dir.is_relative_to(tmp_path / "volumes" / "checkpoints")
    summary = json.loads((output_dir / "reweighter_summary.json").read_text())
    config = yaml.safe_load((workdir / "trainer/configs/rollout-cpu.yaml").read_text())
    assert summary["backend"] == "http"
    assert summary["steps"] == config["max_steps"]
    # It generated on rollout-cpu and pushed its weights back before every step.
    assert summary["generation"] == f"rollout server http://127.0.0.1:{rollout_port}"
    assert summary["weight_sync"] == "gloo" and summary["weight_syncs"] == config["max_steps"]
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as resp:
        served = reweight_requests(resp.read().decode())
    assert served >= config["max_steps"], "the service did not see one reweight call per step"
    assert redis.Redis(port=redis_port).dbsize() > 0, "the service never used compose's Redis"
