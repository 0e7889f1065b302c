"""The recipes of the `reweighter` package docstring, followed as written.

"Add a method": applied to a copy of the package (a toy method's module, one catalogue entry,
one docs row), the copy's service serves the toy over HTTP and gRPC, with its parameters in the
HTTP schema, /v1/info, the CLI flags and the metrics; the files that changed are exactly the
recipe's; and leaving out any step fails where the step says.
"Add an advantage estimator" (docs/methods.md): applied the same way (a kernel module, its
parameter model, one entry, one docs row), the copy's engine computes, checks, lists and gives
flags to the toy estimator; the files that changed are exactly the recipe's.
"Add a route": applied to a copy of the package and the proto as written (two messages, an RPC,
the engine coroutine, one call entry; the stubs regenerated), the copy's service serves the toy
call over HTTP and gRPC and `connect()` reaches it on every backend, with field-named errors,
its OpenAPI entry and its metrics label; the files that changed are exactly the recipe's; and
a step left out fails where the step says. A route of a shape of its own (outside the call
table), added to a running app, still gets field-named schema errors and its metrics label.
"""

from __future__ import annotations

import filecmp
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

import reweighter
from reweighter.methods.catalog import CATALOG
from reweighter.service import BackgroundService

from .conftest import loopback

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(reweighter.__file__).parent
DOC = ROOT / "docs" / "methods.md"
PROTO = ROOT / "proto" / "reweighter" / "v1" / "reweighter.proto"

# -- the docs table and the proto, held to the catalogue ---------------------------------------


def table_problems(doc: str, catalogue: dict[str, list[str]]) -> list[str]:
    """What docs/methods.md's table of methods gets wrong against {method: [wire params]}."""
    start = doc.index("| method | parameters | what it does |")
    rows = {}
    for line in doc[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = re.findall(r"`([^`]+)`", cells[1])
    problems = [f"{m}: no row" for m in catalogue if m not in rows]
    problems += [f"{m}: a row, not in the catalogue" for m in rows if m not in catalogue]
    problems += [
        f"{m}: parameters {rows[m]} != {params}"
        for m, params in catalogue.items()
        if m in rows and sorted(rows[m]) != sorted(params)
    ]
    return problems


def _catalogue() -> dict[str, list[str]]:
    return {
        str(name): [f.alias or n for n, f in spec.params_model.model_fields.items()]
        for name, spec in CATALOG.items()
    }


def test_the_docs_table_lists_the_catalogue() -> None:
    assert table_problems(DOC.read_text(), _catalogue()) == []


def test_the_docs_check_fails_on_a_missing_row_or_parameter() -> None:
    cat = _catalogue()
    assert table_problems(DOC.read_text(), {**cat, "toy": ["weight"]}) == ["toy: no row"]
    cat["dra"] = [*cat["dra"], "extra"]
    assert table_problems(DOC.read_text(), cat)[0].startswith("dra: parameters")


def test_the_proto_lists_no_method_names() -> None:
    """The proto does not list the methods (the catalogue does; Info publishes it), so a new
    method leaves the proto alone. The one name its `method` fields' comments give is the
    default, which the server applies to an empty name."""
    lines = PROTO.read_text().splitlines()
    named = set()
    for i, line in enumerate(lines):
        if re.match(r"\s*string method = \d+;", line):
            j = i - 1
            while j >= 0 and lines[j].strip().startswith("//"):
                named |= {m for m in CATALOG if f'"{m}"' in lines[j]}
                j -= 1
    assert named == {"dra"}, named


def test_the_catalogue_and_the_wire_models_need_no_torch() -> None:
    code = (
        "import sys\n"
        "from reweighter.methods.catalog import CATALOG\n"
        "import reweighter.methods\n"
        "schemas = {n: s.params_model.model_json_schema() for n, s in CATALOG.items()}\n"
        "from reweighter.wire import grpc\n"
        "from reweighter.wire.http import ReweightIn\n"
        "ReweightIn.model_json_schema()  # the method enum and params, from the catalogue\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "print(sorted(str(n) for n in schemas))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(sorted(str(m) for m in CATALOG))


def test_each_method_is_one_module_with_its_kernel_and_one_public_function() -> None:
    """A method's module has its kernel `apply` (the catalogue's; `after` too for a method that
    acts after the estimator) and at most one public function, of the method's name, for
    direct Python callers (embeddings, or similarities as `sim=`): no second copy of either to
    keep in step. The built-in methods all have theirs; the recipe does not ask for one."""
    for name, spec in CATALOG.items():
        module = importlib.import_module(f"reweighter.methods.{name}")
        assert spec.kernel == f"{module.__name__}:apply", name
        assert spec.after in (None, f"{module.__name__}:after"), name
        own = {
            n for n, v in vars(module).items()
            if inspect.isfunction(v) and v.__module__ == module.__name__ and not n.startswith("_")
        }  # fmt: skip
        builtin = name in {"dra", "mmr", "darling", "outcome_ucb"}  # "none": nothing to call
        public = {str(name)} if builtin else own & {str(name)}
        assert own == {"apply"} | ({"after"} if spec.after else set()) | public, (name, own)


# -- "add a method", on a copy of the package --------------------------------------------------

TOY_MODULE = '''\
"""Toy: every reward times `weight` (the recipe test's method)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field


class ToyParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weight: float = Field(2.0, gt=0, allow_inf_nan=False, description="multiplies each reward")


def apply(rewards, sim, mask, params: ToyParams):
    out = rewards * params.weight
    if mask is not None:
        out = out.masked_fill(~mask, 0.0)
    return out, None
'''
TOY_ENTRY = """\
        MethodSpec(
            "toy",
            "Every reward times weight.",
            params="reweighter.methods.toy:ToyParams",
            kernel="reweighter.methods.toy:apply",
            needs_similarity=False,
        ),
"""
TOY_ROW = "| `toy` | `weight` | every reward times weight |\n"

# Runs in the copy: the service, both transports, the schema, the flags, the metrics.
SERVE_TOY = textwrap.dedent(
    """
    import json, sys
    import httpx
    from reweighter.cli import build_parser, method_params
    from reweighter.client import GrpcReweighterClient, ReweighterClient
    from reweighter.config import Settings
    from reweighter.service import BackgroundService
    from reweighter.types import Group, ReweightRequest

    out = {}
    args = build_parser().parse_args(["reweight", "a", "b", "--method", "toy", "--weight", "3"])
    out["flags"] = method_params(args)
    request = ReweightRequest(
        [Group([1.0, 0.5, -2.0], embeddings=[[1, 0], [0, 1], [1, 1]])], "toy", {"weight": 3}
    )
    settings = Settings(host="127.0.0.1", http_port=0, grpc_port=0)
    with BackgroundService(settings) as svc:
        with ReweighterClient(svc.http_url) as client:
            client.wait_ready(120)
            out["http"] = client.reweight(request).groups[0].rewards
            out["info"] = client.info()["methods"]["toy"]
            bad = ReweightRequest(request.groups, "toy", {"weight": -1})
            try:
                client.reweight(bad)
            except Exception as e:
                out["error"] = [type(e).__name__, e.field]
        with GrpcReweighterClient(svc.grpc_target) as client:
            out["grpc"] = client.reweight(request).groups[0].rewards
            out["grpc_info"] = client.info()["methods"]["toy"]
        schema = httpx.get(svc.http_url + "/openapi.json").json()["components"]["schemas"]
        out["enum"] = schema["ReweightIn"]["properties"]["method"]["enum"]
        out["params"] = [s["title"] for s in schema["ReweightIn"]["properties"]["params"]["anyOf"]]
        metrics = httpx.get(svc.http_url + "/metrics").text
        out["metrics"] = 'method="toy"' in metrics
    print(json.dumps(out))
    """
)


def _package_copy(tmp: Path) -> Path:
    """The package (under `tmp`/pkg) and docs/methods.md copied under `tmp`; the package."""
    pkg = tmp / "pkg" / "reweighter"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "docs").mkdir()
    shutil.copy(DOC, tmp / "docs" / "methods.md")
    return pkg


def _insert_row(doc: Path, after: str, row: str, start: str = "") -> None:
    """`row` into a table of `doc` after the line that starts with `after` (the first one after
    `start`)."""
    text = doc.read_text()
    at = text.index(after, text.index(start) if start else 0)
    at = text.index("\n", at) + 1
    doc.write_text(text[:at] + row + text[at:])


def _copy(tmp: Path, *, module: bool = True, entry: bool = True, row: bool = True) -> Path:
    """The package and docs/methods.md copied under `tmp`, with the recipe's steps applied."""
    pkg = _package_copy(tmp)
    if module:
        (pkg / "methods" / "toy.py").write_text(TOY_MODULE)
    if entry:
        cat = pkg / "methods" / "catalog.py"
        text = cat.read_text()
        end = text.index("    )\n}\n", text.index("CATALOG: dict"))
        cat.write_text(text[:end] + TOY_ENTRY + text[end:])
    if row:
        _insert_row(tmp / "docs" / "methods.md", "| `none` |", TOY_ROW)
    return tmp


def _changed(copy: Path) -> list[str]:
    """The files of the copy that differ from the repository's (added ones included)."""
    out = []
    for path in sorted((copy / "pkg" / "reweighter").rglob("*")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        rel = path.relative_to(copy / "pkg")
        original = PACKAGE.parent / rel
        if not original.exists() or not filecmp.cmp(path, original, shallow=False):
            out.append(f"services/reweighter/{rel}")
    doc = copy / "docs" / "methods.md"
    if doc.exists() and not filecmp.cmp(doc, DOC, shallow=False):
        out.append("docs/methods.md")
    return out


def _run(copy: Path, code: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(copy / "pkg"), "REWEIGHTER_COMPILE": "off"}
    env.pop("REDIS_URL", None)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def toy_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(tmp_path_factory.mktemp("recipe"))


def test_the_method_recipe_touches_the_module_the_entry_and_the_docs(toy_copy: Path) -> None:
    assert _changed(toy_copy) == [
        "services/reweighter/reweighter/methods/catalog.py",
        "services/reweighter/reweighter/methods/toy.py",
        "docs/methods.md",
    ]


@pytest.mark.process
def test_a_method_added_by_the_recipe_is_served_everywhere(toy_copy: Path) -> None:
    run = _run(toy_copy, SERVE_TOY)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["flags"] == {"weight": 3}  # `--weight`, generated from ToyParams
    assert out["http"] == pytest.approx([3.0, 1.5, -6.0])  # rewards x 3, by hand
    assert out["grpc"] == out["http"]
    assert out["info"]["description"] == "Every reward times weight."
    assert set(out["info"]["params"]["properties"]) == {"weight"}
    assert out["grpc_info"] == out["info"]  # the Info RPC publishes the same
    assert out["error"] == ["InvalidInput", "params.weight"]
    assert "toy" in out["enum"] and "ToyParams" in out["params"]
    assert out["metrics"]
    # and the copy's docs hold the toy's row
    doc = (toy_copy / "docs" / "methods.md").read_text()
    assert table_problems(doc, {**_catalogue(), "toy": ["weight"]}) == []


def test_each_step_of_the_method_recipe_is_needed(tmp_path: Path) -> None:
    use_toy = (
        "from reweighter.methods.catalog import get_method\n"
        "get_method('toy').params_model\n"
    )
    # no catalogue entry: the method does not exist
    run = _run(_copy(tmp_path / "no-entry", entry=False), use_toy)
    assert "unknown method 'toy'" in run.stderr, run.stderr[-2000:]
    # no module: the entry names what it cannot load
    run = _run(_copy(tmp_path / "no-module", module=False), use_toy)
    assert "cannot load 'reweighter.methods.toy:ToyParams'" in run.stderr, run.stderr[-2000:]
    # no docs row: the docs check fails
    doc = (_copy(tmp_path / "no-row", row=False) / "docs" / "methods.md").read_text()
    assert table_problems(doc, {**_catalogue(), "toy": ["weight"]}) == ["toy: no row"]


# -- "add an advantage estimator" (docs/methods.md), on a copy of the package -----------------

EST_MODULE = '''\
"""Toy estimator: scale * (r - mean(r)) (the recipe test's)."""

from __future__ import annotations


def apply(b, params):
    return b.unbatch(params.scale * b.centred())
'''
EST_PARAMS = '''

class ToyAdvantageParams(BaseModel):
    model_config = _CONFIG

    scale: float = Field(2.0, gt=0, allow_inf_nan=False, description="times the centred rewards")
'''
EST_ENTRY = """\
    EstimatorSpec(
        "toy_adv",
        "scale * (r - mean(r)) (the recipe test's).",
        params=f"{_PARAMS}:ToyAdvantageParams",
        kernel="reweighter.methods.toy_adv:apply",
        flags="toy",
    ),
"""
EST_ROW = "| `toy_adv` | `scale · (r − mean)`; `advantage_params` `scale` | |\n"

# Runs in the copy: the engine's checks and numbers, /v1/info, the offline flags.
USE_EST = textwrap.dedent(
    """
    import json
    from reweighter.cli import _advantage_params, build_parser
    from reweighter.config import Settings
    from reweighter.engine import ReweightEngine
    from reweighter.errors import InvalidInput
    from reweighter.types import Group, ReweightRequest

    engine = ReweightEngine(Settings())
    group = Group(rewards=[1.0, 0.0, 0.5], embeddings=[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    out = {}
    req = ReweightRequest([group], "none", {}, "toy_adv", {"scale": 3.0})
    out["advantages"] = engine.reweight(req).groups[0].advantages
    out["info"] = "toy_adv" in engine.info()["advantages"]
    try:
        engine.reweight(ReweightRequest([group], "none", {}, "toy_adv", {"scale": -1}))
    except InvalidInput as e:
        out["error"] = e.field
    args = build_parser().parse_args(["reweight", "in", "out", "--toy-scale", "3"])
    out["flags"] = _advantage_params(args)
    print(json.dumps(out))
    """
)


def _estimator_copy(
    tmp: Path, *, module: bool = True, params: bool = True, entry: bool = True, row: bool = True
) -> Path:
    """The package and docs/methods.md copied under `tmp`, with the estimator recipe's steps
    (docs/methods.md, "Adding an advantage estimator") applied."""
    pkg = _package_copy(tmp)
    if module:
        (pkg / "methods" / "toy_adv.py").write_text(EST_MODULE)
    if params:
        path = pkg / "methods" / "params.py"
        path.write_text(path.read_text() + EST_PARAMS)
    if entry:
        path = pkg / "methods" / "estimators.py"
        text = path.read_text()
        end = text.index(')\n"""Estimator name -> spec."""')
        path.write_text(text[:end] + EST_ENTRY + text[end:])
    if row:
        _insert_row(tmp / "docs" / "methods.md", "| `none` |", EST_ROW, "<!-- estimators -->")
    return tmp


@pytest.fixture(scope="module")
def estimator_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _estimator_copy(tmp_path_factory.mktemp("estimator-recipe"))


def test_the_estimator_recipe_touches_the_module_the_model_the_entry_and_the_docs(
    estimator_copy: Path,
) -> None:
    assert _changed(estimator_copy) == [
        "services/reweighter/reweighter/methods/estimators.py",
        "services/reweighter/reweighter/methods/params.py",
        "services/reweighter/reweighter/methods/toy_adv.py",
        "docs/methods.md",
    ]
    table = (estimator_copy / "docs" / "methods.md").read_text().split("<!-- estimators -->")[1]
    assert "| `toy_adv` |" in table.split("\n\n", 1)[0]  # its row, in the estimators' table


@pytest.mark.process
def test_an_estimator_added_by_the_recipe_works_from_its_files_alone(
    estimator_copy: Path, tmp_path: Path
) -> None:
    run = _run(estimator_copy, USE_EST)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["advantages"] == pytest.approx([1.5, -1.5, 0.0])  # 3 * (r - 0.5), by hand
    assert out["info"] and out["error"] == "advantage_params.scale"
    assert out["flags"] == {"scale": 3}
    # without its entry the estimator does not exist; without its module the entry says so
    run = _run(_estimator_copy(tmp_path / "no-entry", entry=False), USE_EST)
    assert "unknown advantage kind 'toy_adv'" in run.stderr, run.stderr[-2000:]
    run = _run(_estimator_copy(tmp_path / "no-module", module=False), USE_EST)
    assert "cannot load 'reweighter.methods.toy_adv:apply'" in run.stderr, run.stderr[-2000:]


# -- "add a route", on a copy of the package and the proto ------------------------------------

ROUTE_MESSAGES = """

@dataclass(frozen=True)
class ToyRequest:
    weights: Sequence[float] = wire("the weights to add up", non_empty=True)


@dataclass(frozen=True)
class ToyResult:
    total: float = wire("their sum")
    count: int = wire("how many there were")
"""
ROUTE_PROTO_RPC = "  rpc Toy(ToyRequest) returns (ToyResult);\n"
ROUTE_PROTO_MESSAGES = """
message ToyRequest {
  repeated double weights = 1;
}

message ToyResult {
  double total = 1;
  uint32 count = 2;
}
"""
ROUTE_ENGINE = '''
    async def atoy(self, request: ToyRequest) -> ToyResult:
        """The route recipe's toy: the weights' sum and count."""
        if not request.weights:
            raise InvalidInput("give at least one weight", field="weights")
        return ToyResult(total=float(sum(request.weights)), count=len(request.weights))

'''
ROUTE_SURFACE = "    async def atoy(self, request: ToyRequest) -> ToyResult: ...\n\n"
ROUTE_CALL = '''        Call("toy", ToyRequest, ToyResult, "Add up the weights."),
'''
ROUTE_FILES = [
    "proto/reweighter/v1/reweighter.proto",
    "services/reweighter/reweighter/engine/core.py",
    "services/reweighter/reweighter/engine/surface.py",
    "services/reweighter/reweighter/types.py",
    "services/reweighter/reweighter/wire/_proto/reweighter/v1/reweighter_pb2.py",
    "services/reweighter/reweighter/wire/_proto/reweighter/v1/reweighter_pb2.pyi",
    "services/reweighter/reweighter/wire/_proto/reweighter/v1/reweighter_pb2_grpc.py",
    "services/reweighter/reweighter/wire/calls.py",
]
"""What the route recipe touches: five files by hand and the three stubs scripts/gen_proto.py
writes (docs/architecture.md lists the same)."""


def _insert(path: Path, anchor: str, text: str, after: bool = False) -> None:
    body = path.read_text()
    at = body.index(anchor) + (len(anchor) if after else 0)
    path.write_text(body[:at] + text + body[at:])


def _route_copy(tmp: Path, *, call: bool = True, rpc: bool = True) -> Path:
    """The package and the proto copied under `tmp`, with the route recipe's steps applied."""
    pkg = tmp / "pkg" / "reweighter"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    proto = tmp / "proto" / "reweighter" / "v1" / "reweighter.proto"
    shutil.copytree(PROTO.parents[2], tmp / "proto")
    # 1. the request and result messages
    (pkg / "types.py").write_text((pkg / "types.py").read_text() + ROUTE_MESSAGES)
    # 2. the RPC and its messages in the proto, and the stubs regenerated
    if rpc:
        _insert(proto, "  rpc SubmitMembers(", ROUTE_PROTO_RPC)
        proto.write_text(proto.read_text() + ROUTE_PROTO_MESSAGES)
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    gen = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(gen)  # type: ignore[union-attr]
    gen.generate(pkg / "wire" / "_proto", proto_root=tmp / "proto")
    # 3. the engine coroutine, and its line in the engine's surface
    core = pkg / "engine" / "core.py"
    _insert(core, "    def info(self) -> EngineInfo:", ROUTE_ENGINE)
    _insert(core, "from ..types import (\n", "    ToyRequest,\n    ToyResult,\n", after=True)
    _insert(core, "from ..errors import NotReady", "from ..errors import InvalidInput\n")
    surface = pkg / "engine" / "surface.py"
    _insert(surface, "    def info(self) -> EngineInfo: ...", ROUTE_SURFACE)
    _insert(surface, "from ..types import ", "ToyRequest, ToyResult, ", after=True)
    # 4. one entry in the call table
    if call:
        calls = pkg / "wire" / "calls.py"
        _insert(calls, "    ]\n}\n", ROUTE_CALL)
        _insert(calls, "from ..types import ", "ToyRequest, ToyResult, ", after=True)
    return tmp


def _route_changed(copy: Path) -> list[str]:
    out = _changed(copy)
    if not filecmp.cmp(copy / "proto" / PROTO.relative_to(PROTO.parents[2]), PROTO, shallow=False):
        out.append("proto/reweighter/v1/reweighter.proto")
    return sorted(out)


SERVE_ROUTE = textwrap.dedent(
    """
    import json
    import httpx
    from reweighter.client import connect
    from reweighter.config import Settings
    from reweighter.service import BackgroundService
    from reweighter.types import ToyRequest

    out = {}
    settings = Settings(host="127.0.0.1", http_port=0, grpc_port=0)
    with BackgroundService(settings) as svc:
        urls = {"http": svc.http_url, "grpc": "grpc://" + svc.grpc_target, "inprocess": "inprocess"}
        for kind, url in urls.items():
            with connect(url) as client:
                answer = client.call("toy", ToyRequest([1.5, 2, -0.5]))
                out[kind] = [type(answer).__name__, answer.total, answer.count]
                try:
                    client.call("toy", ToyRequest([]))
                except Exception as e:
                    out[kind + "_error"] = [type(e).__name__, e.field]
        bad = httpx.post(svc.http_url + "/v1/toy", json={"weights": [1, "x"]})
        out["schema_error"] = [bad.status_code, bad.json()["error"]["field"]]
        spec = httpx.get(svc.http_url + "/openapi.json").json()
        out["openapi"] = sorted(spec["paths"]["/v1/toy"]["post"]["requestBody"]["content"]
                                ["application/json"]["schema"].values())
        out["metrics"] = 'endpoint="toy"' in httpx.get(svc.http_url + "/metrics").text
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def route_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _route_copy(tmp_path_factory.mktemp("route"))


def test_the_route_recipe_touches_exactly_its_files(route_copy: Path) -> None:
    assert _route_changed(route_copy) == ROUTE_FILES
    doc = (ROOT / "docs" / "architecture.md").read_text()
    recipe = doc[doc.index("Adding a route") :]
    for path in ROUTE_FILES:  # the docs' recipe names every file the test touched
        assert path.rsplit("/", 1)[-1] in recipe, path


@pytest.mark.process
def test_a_route_added_by_the_recipe_is_served_everywhere(route_copy: Path) -> None:
    run = _run(route_copy, SERVE_ROUTE)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    for kind in ("http", "grpc", "inprocess"):  # 1.5 + 2 - 0.5 = 3.0, three weights
        assert out[kind] == ["ToyResult", 3.0, 3], kind
        assert out[kind + "_error"] == ["InvalidInput", "weights"], kind  # the engine's rule
    assert out["schema_error"] == [422, "weights[1]"]  # the derived model, strict numbers
    assert out["openapi"] == ["#/components/schemas/ToyIn"]
    assert out["metrics"]


@pytest.mark.process
def test_each_step_of_the_route_recipe_is_needed(tmp_path: Path) -> None:
    use = "from reweighter.wire.calls import get_call\nget_call('toy')\n"
    run = _run(_route_copy(tmp_path / "no-call", call=False), use)
    assert "unknown call 'toy'" in run.stderr, run.stderr[-2000:]
    serve = (
        "from reweighter.api.grpc.servicer import ReweighterServicer\n"
        "ReweighterServicer(None, None)\n"
    )
    run = _run(_route_copy(tmp_path / "no-rpc"), serve)
    assert run.returncode == 0, run.stderr[-2000:]  # the complete copy builds its servicer
    run = _run(_route_copy(tmp_path / "no-rpc-2", rpc=False), serve)
    assert "KeyError: 'Toy'" in run.stderr, run.stderr[-2000:]  # no RPC in the proto


# -- a route of its own shape, on a running app -----------------------------------------------


class ToyItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weight: float


class ToyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[ToyItem]


class ToyOut(BaseModel):
    total: float


@pytest.fixture(scope="module")
def toy_route(engine) -> Iterator[BackgroundService]:  # noqa: ANN001 - the session engine
    with BackgroundService(loopback(), engine) as svc:
        assert svc.service is not None
        metrics = svc.service.metrics
        router = APIRouter(prefix="/v1")

        @router.post("/toy", response_model=ToyOut)
        async def toy(body: ToyIn) -> ToyOut:
            with metrics.track("http", "toy"):
                return ToyOut(total=sum(i.weight for i in body.items))

        svc.service.app.include_router(router)
        yield svc


def test_a_route_added_to_the_app_names_fields_and_gets_metrics(
    toy_route: BackgroundService,
) -> None:
    url = toy_route.http_url
    # refused before the handler ran even once: field named from ToyIn, label from the route
    bad = httpx.post(url + "/v1/toy", json={"items": [{"weight": 1}, {"weight": "x"}]})
    assert bad.status_code == 422
    assert bad.json()["error"]["field"] == "items[1].weight"
    extra = httpx.post(url + "/v1/toy", json={"items": [], "what": 1})
    assert extra.json()["error"]["field"] == "what"
    metrics = httpx.get(url + "/metrics").text
    assert re.search(r'_total\{endpoint="toy",method="",status="InvalidInput"', metrics)
    ok = httpx.post(url + "/v1/toy", json={"items": [{"weight": 1.5}, {"weight": 2}]})
    assert ok.status_code == 200 and ok.json() == {"total": 3.5}
    metrics = httpx.get(url + "/metrics").text
    assert re.search(r'_total\{endpoint="toy",method="",status="ok"', metrics)
