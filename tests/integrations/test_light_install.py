"""The light client install (issue 21 item 10), for real: docs/integrations.md's install line
(`pip install <checkout>`) run in a fresh venv (the package index pip is configured with; no
torch, sentence-transformers, fastapi, uvicorn or httpx come with it), then a fresh process from
a neutral directory imports the client and the adapters and calls a real served reweighter over
HTTP and gRPC.

verl's adapter is not imported there: it imports verl, which needs torch, and belongs in verl's
own environment (tests/integrations/test_documented.py imports it from a neutral directory).
The venv is built once per session (about 30 s: venv, wheel build, pip).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from reweighter.types import Group, ReweightRequest

REPO = Path(__file__).resolve().parents[2]
SERVER_ONLY = ("torch", "sentence-transformers", "fastapi", "uvicorn", "httpx", "starlette",
               "transformers", "redis", "prometheus-client")  # fmt: skip

pytestmark = pytest.mark.venv  # a fresh venv and a wheel build

PROBE = r"""
import asyncio, json, sys
import reweighter.client, reweighter.integrations
import reweighter.integrations._stacks, reweighter.integrations.skyrl
import reweighter.integrations.slime, reweighter.integrations.trl
from reweighter.client import connect
from reweighter.types import Group, ReweightRequest

texts = ["add them: 42", "it is 41", "count up to 42"]
request = ReweightRequest(groups=[Group(rewards=[1.0, 0.0, 1.0], completions=texts)])
out = {}
for name, url in json.loads(sys.argv[1]).items():
    with connect(url) as client:
        result = client.reweight(request)
        member = asyncio.run(client.submit_member_async(
            f"light-{name}", "0", 1, 0.5, completion="alone", timeout_s=30))
        out[name] = {"rewards": result.groups[0].rewards, "member": member.reward,
                     "complete": member.complete}
heavy = sorted({m.split(".")[0] for m in sys.modules}
               & {"torch", "sentence_transformers", "fastapi", "uvicorn", "starlette", "httpx"})
try:
    import reweighter.engine
    engine_error = None
except ModuleNotFoundError as e:
    engine_error = str(e)
print(json.dumps({"calls": out, "heavy": heavy, "engine_error": engine_error}))
"""


@pytest.fixture(scope="session")
def light_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv where docs/integrations.md's line was run: `pip install <checkout>` (pip
    builds the wheel in an isolated environment and installs its declared dependencies from the
    configured index)."""
    root = tmp_path_factory.mktemp("light")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", str(venv)], root)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input",
         str(checkout_copy(root))], root)  # fmt: skip
    return venv


def checkout_copy(root: Path) -> Path:
    """What the Dockerfiles copy: building never writes into the shared checkout."""
    src = root / "src"
    if src.exists():
        return src
    for rel in ("pyproject.toml", "README.md", "services/reweighter/reweighter",
                "trainer/reweighter_trainer"):  # fmt: skip
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        if (REPO / rel).is_dir():
            shutil.copytree(REPO / rel, src / rel, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / rel, src / rel)
    return src


def run(cmd: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, **kw)
    assert done.returncode == 0, f"{cmd[:4]}: {done.stderr[-2000:]}"
    return done


def test_the_wheel_declares_only_the_light_dependencies(light_venv: Path, tmp_path: Path) -> None:
    """`pip wheel --no-deps` (the docs' other route): the base requirements name no server
    package; those are all behind the `server` extra."""
    python = str(light_venv / "bin" / "python")
    run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path),
         str(checkout_copy(light_venv.parent))], tmp_path)  # fmt: skip
    (wheel,) = tmp_path.glob("reweighter-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
    requires = [Requirement(line.split(":", 1)[1]) for line in meta.decode().splitlines()
                if line.startswith("Requires-Dist:")]  # fmt: skip
    base = {r.name.lower() for r in requires if r.marker is None}
    server = {r.name.lower() for r in requires
              if r.marker is not None and r.marker.evaluate({"extra": "server"})}  # fmt: skip
    assert base == {"numpy", "pydantic", "pydantic-settings", "grpcio", "protobuf", "aiohttp",
                    "tenacity"}  # fmt: skip
    assert {"torch", "sentence-transformers", "fastapi", "uvicorn"} <= server


def test_declared_dependencies_are_light(light_venv: Path, tmp_path: Path) -> None:
    listed = run([str(light_venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                 tmp_path).stdout  # fmt: skip
    installed = {d["name"].lower().replace("_", "-") for d in json.loads(listed)}
    assert "reweighter" in installed and "aiohttp" in installed and "grpcio" in installed
    assert not installed & set(SERVER_ONLY), sorted(installed & set(SERVER_ONLY))


def test_client_and_adapters_call_a_served_reweighter(
    light_venv: Path, tmp_path: Path, service, http
) -> None:
    urls = {"http": service.http_url, "grpc": f"grpc://{service.grpc_target}"}
    probe = run([str(light_venv / "bin" / "python"), "-c", PROBE, json.dumps(urls)],
                tmp_path, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    assert got["heavy"] == []  # nothing of the server was imported
    want = http.reweight(ReweightRequest(groups=[Group(
        rewards=[1.0, 0.0, 1.0], completions=["add them: 42", "it is 41", "count up to 42"])]))
    for name in urls:
        assert got["calls"][name]["rewards"] == pytest.approx(want.groups[0].rewards, abs=1e-6)
        assert got["calls"][name]["complete"] is True  # a group of one completes at once
        assert got["calls"][name]["member"] == pytest.approx(0.5)
    assert "pip install 'reweighter[server]'" in got["engine_error"]


def test_the_server_command_names_the_extra(light_venv: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(light_venv / "bin" / "reweighter"), "serve"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "pip install 'reweighter[server]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_python_m_server_names_the_extra(light_venv: Path, tmp_path: Path) -> None:
    """`python -m reweighter.server` (the module form of `reweighter serve`) in a light install
    ends on the install hint, not on a bare 'No module named uvicorn'."""
    done = subprocess.run([str(light_venv / "bin" / "python"), "-m", "reweighter.server"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert "pip install 'reweighter[server]'" in done.stderr.strip().splitlines()[-1]
