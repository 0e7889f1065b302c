"""The house's figures for one checkout: how large the planner and the encoder are, the longest
functions, what stands on the HTTP path, and where code repeats itself.

Why: a structural change ("one HTTP edge, one planner, tokenising apart from the model") is
judged by figures taken the same way before and after it. This reads a checkout's sources as
text (AST) and runs nothing of it, so the same script measures an old commit's worktree and
today's tree alike:

    git worktree add /tmp/base <commit>
    .venv/bin/python bench/tools/house_metrics.py /tmp/base > before.txt
    .venv/bin/python bench/tools/house_metrics.py . > after.txt

Each figure says how it is counted (the heuristics are printed beside the figures):

- planner: the lines of the embedding room's `plan` module, or of every module of its `plan`
  package once it has become one;
- encoder: the lines of `class SentenceTransformerEncoder` (decorators included), its
  constructor's parameters and the distinct `self.<name>` it assigns;
- the ten longest functions of the package (nested functions count on their own too);
- handlers on the HTTP path: the stacked layers (protocol classes under `api/http/`, uvicorn's
  subclassed or an `asyncio.Protocol` around it; ASGI app wrappers, functions taking and
  returning an `ASGIApp`; ASGI middleware added with `add_middleware` or `@app.middleware`; the
  framework app itself, `FastAPI(...)`) and the receive wrappers (functions annotated
  `-> Receive`: one more layer between the socket's bytes and the route, on some requests);
  route classes (`APIRoute` subclasses) and exception handlers are listed beside them;
- uvicorn members read: the strings of the `UVICORN_MEMBERS` table (the guard's own list of
  what it reads that uvicorn does not promise), and reads of `.__self__` (a bound method's
  owner: the request cycle behind `receive`);
- error writers: functions under `api/http/` that build an error body (a dict with an "error"
  key, `ErrorOut.from_error`, `openai_error`): each is one place that decides what an error
  looks like on the wire (the innermost such function; one that only calls another is not);
- auth resolutions on the HTTP path: functions under `api/` (gRPC's excepted) that judge a
  bearer token (call `resolve_bearer` or `check_bearer`), in modules something imports (a dead
  module is listed, not counted): each is one place a request's key may be judged (the
  OpenRLHF route's path secret is another credential, not counted); the functions that read
  the Authorization header are listed beside them;
- dead modules: modules of the package that no Python file of the checkout imports or names
  (entry points excepted);
- `duplicates` per top-level folder of the package (the `duplicates` command, when installed):
  pairs with both sides in the folder, and pairs across folders (counted under both); pairs
  in generated code (`wire/_proto/`) are left out.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path("services/reweighter/reweighter")
GENERATED = "wire/_proto/"
ENTRY_POINTS = {"__init__", "__main__", "cli", "aot_child"}
"""Modules run rather than imported (`python -m`, console scripts, a child process)."""


@dataclass(frozen=True)
class Source:
    rel: str  # path inside the package, "api/http/app.py"
    tree: ast.Module
    text: str

    @property
    def module(self) -> str:
        parts = Path(self.rel).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join(("reweighter", *parts))


def sources(root: Path) -> list[Source]:
    out = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        rel = path.relative_to(root / PACKAGE).as_posix()
        if rel.startswith(GENERATED):
            continue
        text = path.read_text()
        out.append(Source(rel, ast.parse(text), text))
    return out


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def span(node: ast.AST) -> int:
    """A definition's lines, its decorators included."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return node.end_lineno - start + 1  # type: ignore[attr-defined, operator]


def functions(src: Source) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) for every function, nested ones too."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((prefix + child.name, child))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(src.tree, "")
    return found


def planner(root: Path) -> list[str]:
    embedding = root / PACKAGE / "embedding"
    module, package = (embedding / "plan").with_suffix(".py"), embedding / "plan"
    files = sorted(package.rglob("*.py")) if package.is_dir() else []
    if module.exists():
        files.insert(0, module)
    if not files:
        return ["planner: the embedding room has no plan module or package (name the new place)"]
    out = [f"planner: {sum(lines(f) for f in files)} lines"]
    out += [f"  {f.relative_to(root / PACKAGE)}: {lines(f)}" for f in files]
    return out


def encoder(srcs: list[Source]) -> list[str]:
    for src in srcs:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ClassDef) and node.name == "SentenceTransformerEncoder":
                init = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                             and n.name == "__init__"), None)  # fmt: skip
                params = 0
                if init is not None:
                    a = init.args
                    params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - 1
                    params += (a.vararg is not None) + (a.kwarg is not None)
                attrs = {t.attr for n in ast.walk(node)
                         for t in _targets(n)
                         if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                         and t.value.id == "self"}  # fmt: skip
                return [f"encoder class SentenceTransformerEncoder ({src.rel}:{node.lineno}): "
                        f"{span(node)} lines, {params} constructor parameters, "
                        f"{len(attrs)} attributes (distinct self.<name> assigned); "
                        f"its file {len(src.text.splitlines())} lines"]  # fmt: skip
    return ["encoder class SentenceTransformerEncoder: not found"]


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return [node.target]
    return []


def longest(srcs: list[Source], n: int = 10) -> list[str]:
    rows = sorted(((span(f), name, src.rel, f.lineno) for src in srcs
                   for name, f in functions(src)), key=lambda r: (-r[0], r[2], r[3]))  # fmt: skip
    out = [f"the {n} longest functions (lines, name, file:line):"]
    out += [f"  {k:3d}  {name}  {rel}:{line}" for k, name, rel, line in rows[:n]]
    return out


def _name(node: ast.AST) -> str:
    """The last part of a called or based-on name: `a.b.C` -> "C"."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


def _uvicorn_names(src: Source) -> set[str]:
    return {a.asname or a.name for n in ast.walk(src.tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("uvicorn")
            for a in n.names}  # fmt: skip


def _asyncio_protocol(base: ast.expr, src: Source) -> bool:
    """`asyncio.Protocol` (or a name imported from asyncio ending in Protocol), not typing's."""
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        return base.value.id == "asyncio" and base.attr.endswith("Protocol")
    return isinstance(base, ast.Name) and any(
        isinstance(n, ast.ImportFrom) and n.module == "asyncio"
        and any((a.asname or a.name) == base.id for a in n.names)
        for n in ast.walk(src.tree)
    )  # fmt: skip


def http_path(srcs: list[Source]) -> list[str]:
    http = [s for s in srcs if s.rel.startswith("api/http/")]
    protocols, middleware, apps, wrappers, receives, handlers, routes = [], [], [], [], [], [], []
    for src in srcs:
        uv = _uvicorn_names(src)
        for node in ast.walk(src.tree):
            if isinstance(node, ast.ClassDef) and any(
                (_name(b) in uv and _name(b).endswith("Protocol"))
                or (src in http and _asyncio_protocol(b, src))
                for b in node.bases
            ):
                protocols.append(f"{node.name} ({src.rel})")
    for src in http:
        for node in ast.walk(src.tree):
            if isinstance(node, ast.Call) and _name(node.func) == "add_middleware" and node.args:
                middleware.append(f"{_name(node.args[0])} ({src.rel})")
            if isinstance(node, ast.Call) and _name(node.func) in ("add_exception_handler",):
                handlers.append(f"{src.rel}:{node.lineno}")
            if isinstance(node, ast.Call) and _name(node.func) == "FastAPI":
                apps.append(f"FastAPI ({src.rel})")
            if isinstance(node, ast.ClassDef) and any(_name(b) == "APIRoute" for b in node.bases):
                routes.append(f"{node.name} ({src.rel})")
        for name, f in functions(src):
            decorators = {_name(d) for d in f.decorator_list}
            if "middleware" in decorators:
                middleware.append(f"{name} ({src.rel})")
            if "exception_handler" in decorators:
                handlers.append(f"{name} ({src.rel})")
            returns = _name(f.returns) if f.returns is not None else ""
            takes = {_name(a.annotation) for a in f.args.args if a.annotation is not None}
            if returns == "Receive":
                receives.append(f"{name} ({src.rel})")
            if returns == "ASGIApp" and "ASGIApp" in takes:
                wrappers.append(f"{name} ({src.rel})")
    layers = len(protocols) + len(wrappers) + len(middleware) + len(apps)
    return [
        f"handlers on the HTTP path: {layers + len(receives)} "
        f"({layers} stacked layers + {len(receives)} receive wrappers)",
        f"  protocol classes (uvicorn's subclassed, or asyncio.Protocol): {len(protocols)}  "
        f"{', '.join(protocols)}",
        f"  ASGI app wrappers (ASGIApp in, ASGIApp out): {len(wrappers)}  {', '.join(wrappers)}",
        f"  ASGI middleware (add_middleware): {len(middleware)}  {', '.join(middleware)}",
        f"  framework apps: {len(apps)}  {', '.join(apps)}",
        f"  receive wrappers (-> Receive: a layer between the socket's bytes and the route): "
        f"{len(receives)}  {', '.join(receives)}",
        f"  (beside them, inside the framework) route classes (APIRoute subclasses): "
        f"{len(routes)}  {', '.join(routes)}",
        f"  (beside them) exception handlers: {len(handlers)}  {', '.join(handlers)}",
    ]


def uvicorn_members(srcs: list[Source]) -> list[str]:
    table, where = 0, "no UVICORN_MEMBERS table"
    selfs = []
    for src in srcs:
        for node in ast.walk(src.tree):
            targets = _targets(node)
            if any(isinstance(t, ast.Name) and t.id == "UVICORN_MEMBERS" for t in targets):
                value = node.value  # type: ignore[attr-defined]
                table = sum(isinstance(c, ast.Constant) and isinstance(c.value, str)
                            for c in ast.walk(value))  # fmt: skip
                where = f"UVICORN_MEMBERS in {src.rel}"
            if isinstance(node, ast.Attribute) and node.attr == "__self__":
                selfs.append(f"{src.rel}:{node.lineno}")
            if isinstance(node, ast.Constant) and node.value == "__self__":
                selfs.append(f"{src.rel}:{node.lineno}")
    return [
        f"uvicorn private members read: {table} ({where})",
        f"  reads of a bound method's owner (`__self__`): {len(selfs)}  {', '.join(selfs)}",
    ]


def _builds_error_body(f: ast.AST) -> bool:
    for n in ast.walk(f):
        if isinstance(n, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == "error" for k in n.keys
        ):
            return True
        if isinstance(n, ast.Call) and _name(n.func) in ("from_error", "openai_error"):
            return True
    return False


def _builds_response(f: ast.AST) -> bool:
    for n in ast.walk(f):
        if isinstance(n, ast.Call) and _name(n.func).endswith("Response"):
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str | bytes):
            value = n.value.decode("latin-1") if isinstance(n.value, bytes) else n.value
            if value.startswith("HTTP/1.1 "):
                return True
        if isinstance(n, ast.JoinedStr) and any(
            isinstance(v, ast.Constant) and str(v.value).startswith("HTTP/1.1 ") for v in n.values
        ):
            return True
    return False


def error_writers(srcs: list[Source]) -> list[str]:
    found = [f"{name} ({src.rel})" for src in srcs if src.rel.startswith("api/http/")
             for name in innermost(src, _builds_error_body)]  # fmt: skip
    return [f"error writers: {len(found)}  {', '.join(found)}"]


def imports(src: Source) -> set[str]:
    """The package modules `src` imports (relative imports resolved; `from . import x` names
    the module x when there is one)."""
    out = set()
    package = src.module if src.rel.endswith("__init__.py") else src.module.rsplit(".", 1)[0]
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def dead_modules(root: Path, srcs: list[Source]) -> list[str]:
    """Modules of the package that no Python file of the checkout imports (the package's own
    relative imports resolved) or names as a dotted path in its text (a dynamic import's
    target, `pkg://reweighter.integrations.verl` in a stack's config), entry points excepted.
    """
    imported: set[str] = set()
    for src in srcs:
        for name in imports(src):
            if name.startswith("reweighter"):
                parts = name.split(".")
                imported.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        capture_output=True,
        text=True,
    )
    texts = {f: (root / f).read_text(errors="replace") for f in listed.stdout.split()
             if (root / f).is_file()}  # fmt: skip
    dead = []
    for s in srcs:
        if s.module in imported or Path(s.rel).stem in ENTRY_POINTS:
            continue
        own = (PACKAGE / s.rel).as_posix()
        named = re.compile(re.escape(s.module) + r"(?![\w])")
        if not any(named.search(t) for f, t in texts.items() if f != own):
            dead.append(s.module)
    return dead


AUTH_CALLS = ("resolve_bearer", "check_bearer")


def _judges_key(f: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _name(n.func) in AUTH_CALLS for n in ast.walk(f))


def _reads_key(f: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Constant) and n.value in ("authorization", b"authorization")
        for n in ast.walk(f)
    )


def innermost(src: Source, test: object) -> list[str]:
    """The functions of `src` for which `test(node)` holds and for none nested in them (the
    function that does the thing, not the ones around it)."""
    out = []
    for name, f in functions(src):
        nested = [g for _, g in functions(Source(src.rel, ast.Module([f], []), "")) if g is not f]
        if test(f) and not any(test(g) for g in nested):  # type: ignore[operator]
            out.append(name)
    return out


def auth_resolutions(srcs: list[Source], dead: list[str]) -> list[str]:
    found, skipped, reads = [], [], []
    for src in srcs:
        if src.rel.startswith("api/") and not src.rel.startswith("api/grpc/"):
            for name in innermost(src, _judges_key):
                (skipped if src.module in dead else found).append(f"{name} ({src.rel})")
            if src.module not in dead:
                reads += [f"{name} ({src.rel})" for name in innermost(src, _reads_key)]
    out = [
        f"auth resolutions on the HTTP path: {len(found)}  {', '.join(found)}",
        f"  (beside them) reads of the Authorization header: {len(reads)}  {', '.join(reads)}",
    ]
    if skipped:
        out.append(f"  in dead modules, not counted: {', '.join(skipped)}")
    return out


ROW = re.compile(r"^D\d+ (\S+):\d+-\d+ ~ (\S+):\d+-\d+(.*)$")


def duplicates(root: Path) -> list[str]:
    tool = shutil.which("duplicates")
    if tool is None:
        return ["duplicates: the `duplicates` command is not installed here"]
    run = subprocess.run(
        [tool, "--repo", str(root / PACKAGE), "--most", "200", "--seconds", "120"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    text = run.stdout.strip().splitlines()
    within: Counter[str] = Counter()
    across: Counter[str] = Counter()
    kept = 0
    for line in text:
        m = ROW.match(line)
        if not m:
            continue
        a, b, _ = m.groups()
        if a.startswith(GENERATED) or b.startswith(GENERATED):
            continue
        kept += 1
        fa, fb = (p.split("/")[0] if "/" in p else "(top)" for p in (a, b))
        if fa == fb:
            within[fa] += 1
        else:
            across[fa] += 1
            across[fb] += 1
    out = [f"duplicates: {text[0] if text else '(no output)'}",
           f"  pairs outside generated code ({GENERATED}): {kept}",
           "  folder: pairs within / pairs across"]  # fmt: skip
    for folder in sorted(set(within) | set(across)):
        out.append(f"  {folder}: {within[folder]} / {across[folder]}")
    out += [f"  {line}" for line in text if line.startswith(("left out", "incomplete"))]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of the repository")
    args = parser.parse_args(argv)
    root = args.checkout.resolve()
    if not (root / PACKAGE).is_dir():
        parser.error(f"{root} has no {PACKAGE}")
    head = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %cI"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    srcs = sources(root)
    dead = dead_modules(root, srcs)
    out = [f"checkout: {root} (HEAD {head or 'unknown'}; uncommitted changes count)",
           f"package: {len(srcs)} modules outside {GENERATED}, "
           f"{sum(len(s.text.splitlines()) for s in srcs)} lines"]  # fmt: skip
    out += planner(root) + encoder(srcs) + longest(srcs) + http_path(srcs)
    out += uvicorn_members(srcs) + error_writers(srcs) + auth_resolutions(srcs, dead)
    out += [f"dead modules (nothing imports or names them): {len(dead)}  {', '.join(dead)}"]
    out += duplicates(root)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
