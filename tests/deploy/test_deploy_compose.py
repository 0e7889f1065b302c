"""docker-compose.yml (+ docker-compose.gpu.yml): valid for Docker Compose v2 in every profile,
and wired the way the services expect (health checks, GPU reservations, ports, variables).
Plain `docker compose up` is redis + the reweighter on CPU; the `cpu` profile adds the trainer's
smoke run; the GPU stack is the `gpu` profile with docker-compose.gpu.yml merged in."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from deploy_support import (
    COMPOSE_FILE,
    ENV_EXAMPLE,
    GPU_FILE,
    INSTALL_HINT,
    REPO,
    compose_command,
    compose_variables,
    env_example,
    load_compose,
    run_compose,
)

DEFAULT = {"redis", "redis-cache", "reweighter"}
CPU = DEFAULT | {"rollout-cpu", "trainer-cpu"}
GPU = DEFAULT | {"rollout", "trainer"}
OFFLINE_OVERRIDE = REPO / "tests" / "deploy" / "compose.offline.yml"
ROLLOUT_VARS = {
    "MODEL",
    "TENSOR_PARALLEL_SIZE",
    "DATA_PARALLEL_SIZE",
    "GPU_MEMORY_UTILIZATION",
    "MAX_MODEL_LEN",
    "HOST",
    "PORT",
}


@pytest.fixture(scope="module")
def compose() -> list[str]:
    cmd = compose_command()
    if cmd is None:
        pytest.skip(f"Docker Compose v2 not found: {INSTALL_HINT}")
    return cmd


@pytest.fixture
def empty_env(tmp_path: Path) -> Path:
    path = tmp_path / "empty.env"
    path.write_text("")
    return path


# ---- the validator -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "profiles", [[], ["cpu"], ["gpu"], ["monitoring"], ["cpu", "monitoring"], ["gpu", "monitoring"]]
)
@pytest.mark.parametrize("env_file", ["defaults", ".env.example"])
def test_compose_file_validates(compose, empty_env, profiles, env_file) -> None:
    env = empty_env if env_file == "defaults" else ENV_EXAMPLE
    flags = [a for p in profiles for a in ("--profile", p)]
    # --profile flags win over the env file's COMPOSE_PROFILES (gpu in .env.example).
    profiles = profiles or (["gpu"] if env_file == ".env.example" else [])
    extra = (GPU_FILE,) if "gpu" in profiles else ()
    out = run_compose(compose, *flags, "config", "-q", env_file=env, extra=extra)
    assert out.returncode == 0, out.stderr
    names = run_compose(compose, *flags, "config", "--services", env_file=env, extra=extra)
    assert names.returncode == 0, names.stderr
    expected = (CPU if "cpu" in profiles else GPU if "gpu" in profiles else DEFAULT) | (
        {"prometheus"} if "monitoring" in profiles else set()
    )
    assert set(names.stdout.split()) == expected


def test_plain_up_is_the_cpu_serving_stack(compose, empty_env) -> None:
    """No .env, no profile: redis and the reweighter on CPU, published on loopback 8080/50051,
    no GPU asked for anywhere."""
    out = run_compose(compose, "config", "--format", "json", env_file=empty_env)
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout)
    assert set(resolved["services"]) == DEFAULT
    assert "devices" not in json.dumps(resolved)
    rw = resolved["services"]["reweighter"]
    assert rw["build"]["args"] == {"DEVICE": "cpu"}
    assert rw["image"].endswith("-cpu")
    assert rw["environment"]["REWEIGHTER_DEVICE"] == "cpu"
    published = {(p["host_ip"], p["published"], p["target"]) for p in rw["ports"]}
    assert published == {("127.0.0.1", "8080", 8080), ("127.0.0.1", "50051", 50051)}


def test_env_example_is_the_gpu_stack(compose) -> None:
    """`cp .env.example .env && docker compose up`: its COMPOSE_FILE and COMPOSE_PROFILES give
    the reweighter on CUDA, the rollout server and the trainer, each with its GPU."""
    out = run_compose(compose, "config", "--format", "json", env_file=ENV_EXAMPLE, file=None)
    assert out.returncode == 0, out.stderr
    services = json.loads(out.stdout)["services"]
    assert set(services) == GPU
    rw = services["reweighter"]
    assert rw["build"]["args"] == {"DEVICE": "gpu"}
    assert not rw["image"].endswith("-cpu")
    assert rw["environment"]["REWEIGHTER_DEVICE"] == "cuda"
    for name in ("reweighter", "rollout", "trainer"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert [d["driver"] for d in devices] == ["nvidia"], name


def test_offline_override_is_only_the_build_network(compose, empty_env) -> None:
    """The engine test's override for this offline machine changes the builds' network and
    nothing else; the shipped files never ask for the host network."""
    plain = run_compose(compose, "--profile", "cpu", "config", "--format", "json",
                        env_file=empty_env)  # fmt: skip
    merged = run_compose(compose, "--profile", "cpu", "config", "--format", "json",
                         env_file=empty_env, extra=(OFFLINE_OVERRIDE,))  # fmt: skip
    assert plain.returncode == merged.returncode == 0, merged.stderr
    a, b = json.loads(plain.stdout)["services"], json.loads(merged.stdout)["services"]
    for name in a:
        if "build" in a[name]:
            assert b[name]["build"].pop("network") == "host", name
        assert a[name] == b[name], name
    for f in (COMPOSE_FILE, GPU_FILE):
        assert "network: host" not in f.read_text() and "network_mode" not in f.read_text()


def test_validator_rejects_a_broken_file(compose, tmp_path, empty_env) -> None:
    """The check above can fail: a wrong depends_on condition is refused."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("service_healthy", "service_happy", 1))
    out = run_compose(compose, "--profile", "cpu", "config", "-q", env_file=empty_env, file=broken)
    assert out.returncode != 0
    assert "depends_on.redis.condition" in out.stderr


def test_cpu_profile_reserves_no_gpu(compose, empty_env) -> None:
    """Compose's own resolved model of the cpu profile: no device reservation anywhere."""
    out = run_compose(compose, "--profile", "cpu", "config", "--format", "json", env_file=empty_env)
    assert out.returncode == 0, out.stderr
    resolved = json.loads(out.stdout)
    assert set(resolved["services"]) == CPU
    assert "devices" not in json.dumps(resolved)
    assert resolved["services"]["reweighter"]["build"]["args"] == {"DEVICE": "cpu"}
    assert resolved["services"]["trainer-cpu"]["build"]["args"] == {"DEVICE": "cpu"}


def test_loader_agrees_with_compose(compose, empty_env) -> None:
    """The e2e test reads the file with deploy_support.load_compose: it must see what compose
    sees (commands, environment, healthchecks) for the cpu profile."""
    out = run_compose(compose, "--profile", "cpu", "config", "--format", "json", env_file=empty_env)
    resolved = json.loads(out.stdout)["services"]
    ours = load_compose().profile("cpu")
    for name in CPU:
        theirs = resolved[name]
        assert ours[name].spec.get("command") == theirs.get("command"), name
        assert ours[name].environment({}) == {
            k: v for k, v in (theirs.get("environment") or {}).items() if v is not None
        }, name
        if "healthcheck" in theirs:
            assert ours[name].spec["healthcheck"]["test"] == theirs["healthcheck"]["test"], name


# ---- wiring (read with the same loader the e2e test uses) ----------------------------------
def test_profiles_split_the_stacks() -> None:
    c = load_compose()
    assert set(c.profile()) == DEFAULT
    assert set(c.profile("cpu")) == CPU
    assert set(c.profile("gpu")) == GPU
    # The GPU file changes the reweighter in place: same name for clients and scrape targets.
    assert set(load_compose(gpu=True).services) == set(c.services)


def test_gpu_services_reserve_gpus_and_cpu_services_none() -> None:
    c, g = load_compose(), load_compose(gpu=True)
    for name in ("reweighter", "rollout", "trainer"):
        devices = g.services[name].gpu_devices()
        assert devices and all(d["driver"] == "nvidia" for d in devices), name
    for name in CPU:
        assert c.services[name].gpu_devices() == [], name
    assert g.services["reweighter"].environment({})["REWEIGHTER_DEVICE"] == "cuda"
    assert c.services["reweighter"].environment({})["REWEIGHTER_DEVICE"] == "cpu"


def test_every_dependency_waits_for_health() -> None:
    c = load_compose()
    for name, svc in c.services.items():
        for dep, cond in (svc.spec.get("depends_on") or {}).items():
            assert cond["condition"] == "service_healthy", f"{name} -> {dep}"
            assert "healthcheck" in c.services[dep].spec, f"{dep} has no healthcheck"
    assert set(c.services["trainer"].spec["depends_on"]) == {"reweighter", "rollout"}
    assert set(c.services["trainer-cpu"].spec["depends_on"]) == {"reweighter", "rollout-cpu"}


def test_health_checks_hit_the_right_endpoints() -> None:
    c = load_compose()
    for svc in (c.services["reweighter"], load_compose(gpu=True).services["reweighter"]):
        test = " ".join(svc.spec["healthcheck"]["test"])
        assert "/readyz" in test and "REWEIGHTER_HTTP_PORT" in test
    rollout = c.services["rollout"]
    assert "127.0.0.1:8000/health/" in " ".join(rollout.spec["healthcheck"]["test"])
    assert rollout.spec["healthcheck"]["test"][0] == "CMD"
    # vLLM's own /health on CPU (TRL's client checks /health, without the slash).
    cpu = c.services["rollout-cpu"].spec["healthcheck"]["test"]
    assert cpu[0] == "CMD" and "127.0.0.1:%s/health'" in " ".join(cpu) and "PORT" in cpu[-1]


def test_rollout_gets_every_variable_its_entrypoint_reads() -> None:
    env = load_compose().services["rollout"].environment({})
    assert set(env) >= ROLLOUT_VARS
    assert env["PORT"] == "8000" and env["HOST"] == "0.0.0.0"
    assert re.match(r"^[\w.-]+/[\w.-]+$", env["MODEL"])
    entrypoint = REPO / "services" / "rollout" / "entrypoint.sh"
    if not entrypoint.exists():
        pytest.fail("services/rollout/entrypoint.sh is missing (the rollout image's entrypoint)")
    text = entrypoint.read_text()
    for var in ROLLOUT_VARS:
        assert re.search(rf"\${{?{var}\b", text), f"entrypoint.sh never reads {var}"


def test_ports_and_service_urls_line_up() -> None:
    c = load_compose()
    published = {
        name: {p.rsplit(":", 1)[1] for p in svc.spec.get("ports", [])}
        for name, svc in c.services.items()
    }
    assert published["reweighter"] == {"8080", "50051"}
    assert published["rollout"] == {"8000"} and published["rollout-cpu"] == {"8000"}
    assert "redis" not in published or not published["redis"]
    for p in c.services["reweighter"].spec["ports"]:
        assert p.startswith("127.0.0.1:"), "published on loopback unless PUBLISH_ADDRESS says so"
    env = c.services["reweighter"].environment({})
    assert (env["REWEIGHTER_HTTP_PORT"], env["REWEIGHTER_GRPC_PORT"]) == ("8080", "50051")
    assert env["REWEIGHTER_HOST"] == "0.0.0.0"
    assert env["REDIS_URL"] == "redis://redis:6379/0"
    for name in ("trainer", "trainer-cpu"):
        assert "reweighter.url=http://reweighter:8080" in c.services[name].spec["command"]
    assert "vllm_server_base_url=http://rollout:8000" in c.services["trainer"].spec["command"]
    cpu = c.services["trainer-cpu"].spec["command"]
    assert "vllm_server_base_url=http://rollout-cpu:8000" in cpu
    assert c.services["rollout-cpu"].environment({})["HOST"] == "0.0.0.0"  # reachable by name


def test_trainer_configs_exist() -> None:
    c = load_compose()
    for name in ("trainer", "trainer-cpu"):
        cmd = c.services[name].spec["command"]
        config = cmd[cmd.index("--config") + 1]
        assert (REPO / config).is_file(), f"{name}: {config} does not exist"


def test_volumes_hold_model_cache_and_checkpoints() -> None:
    c = load_compose()
    assert set(c.raw["volumes"]) == {"models", "checkpoints"}
    mounts = {n: s.spec.get("volumes", []) for n, s in c.services.items()}
    assert "checkpoints:/data/checkpoints" in mounts["trainer"]
    assert "checkpoints:/data/checkpoints" in mounts["trainer-cpu"]
    assert "models:/cache/huggingface" in mounts["rollout"]
    # Each CPU image converts the policy at build time into its own /opt/policy: no volume is
    # shared between rollout-cpu and trainer-cpu (one once raced the other's first start).
    assert not any("/opt/policy" in m for m in mounts["rollout-cpu"] + mounts["trainer-cpu"])
    assert c.services["rollout-cpu"].spec["shm_size"] == "1gb"  # vLLM's 160 MiB shm buffer
    assert "model.smollm2.cache_dir=/opt/policy" in c.services["trainer-cpu"].spec["command"]
    for name in ("trainer", "trainer-cpu"):
        out = next(a for a in c.services[name].spec["command"] if a.startswith("output_dir="))
        assert out.removeprefix("output_dir=").startswith("/data/checkpoints/"), name


def test_env_example_lists_every_variable_with_the_same_default() -> None:
    values, commented = env_example()
    used = compose_variables()
    missing = set(used) - set(values) - commented
    assert not missing, f".env.example lacks {sorted(missing)}"
    for name, default in used.items():
        if name in values and default is not None:
            assert values[name] == default, f"{name}: .env.example {values[name]!r} != {default!r}"
    unused = set(values) - set(used) - {"COMPOSE_PROFILES", "COMPOSE_FILE"}
    assert not unused, f".env.example sets variables the compose files ignore: {sorted(unused)}"
    assert values["COMPOSE_PROFILES"] == "gpu"
    assert values["COMPOSE_FILE"] == f"{COMPOSE_FILE.name}:{GPU_FILE.name}"


def test_prometheus_scrapes_the_service_port() -> None:
    c = load_compose()
    mount = c.services["prometheus"].spec["volumes"][0]
    source = REPO / mount.split(":")[0]
    config = yaml.safe_load(source.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "reweighter"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["reweighter:8080"]
