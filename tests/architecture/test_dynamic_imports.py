"""No import the contracts cannot see: every dynamic import of the package is checked by the
import contract as if it were written out.

Why: import-linter reads `import` statements. Three places import by name at run time, so
that a light install never loads torch or the engine until a name is used: the method
catalogue (`methods/catalog.py`: "module:attribute" paths), the methods package's lazy names
(`methods/__init__.py`: `_LAZY`) and the assembly package's (`assembly/__init__.py`:
`_WHERE`). A path in one of those tables could name a module of a higher room (a kernel in
`api/`), and no contract would say so.

So each such site is registered here with the literal table it imports from. The tables are
read from the source (AST, nothing imported), every import they can make becomes an import
statement appended to the importer in a copy of the package, and `lint-imports` checks the
copy against the repository's contracts:
- the layers and the acyclic-siblings contracts hold with every dynamic import counted;
- a forbidden contract ("wire models are torch-free", ...) counts a dynamic import made by
  one of its own source modules; one made elsewhere is lazy (run on first use of a name, not
  on import), so it is not a chain of imports from a source module, and is ignored there:
  the wire reads the catalogue, whose kernels load only when the engine runs one (the
  fresh-process tests in test_imports.py show the light client importing without torch).
A new `import_module` / `__import__` anywhere in the package fails until it is registered
here (or written as a plain import); a registered call whose shape changed fails too.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .test_imports import CONTRACTS, LINT, PACKAGES, _env, contract, verdicts

PACKAGE = PACKAGES["reweighter"]
DYNAMIC = {"import_module", "__import__", "run_module", "module_from_spec", "resolve_name"}
"""Calls that import a module named by a value (importlib, builtins, runpy, pkgutil)."""
PATH = re.compile(r"^reweighter(?:\.\w+)+:\w+$")


def _strings(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "text"` constants (what an f-string of a table may use)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    out[target.id] = node.value.value
    return out


def _text(node: ast.expr, names: dict[str, str]) -> str | None:
    """A literal string, or an f-string of module-level string constants; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v.value, ast.Name) and v.value.id in names and not v.format_spec:  # type: ignore[attr-defined]
                parts.append(names[v.value.id])  # type: ignore[attr-defined]
            else:
                return None
        return "".join(parts)
    return None


def _assigned(tree: ast.Module, name: str) -> ast.expr:
    """The value a module-level assignment gives `name` (exactly one such assignment)."""
    found = []
    for n in tree.body:
        targets = n.targets if isinstance(n, ast.Assign) else [getattr(n, "target", None)]
        if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
            found += [n.value for t in targets if isinstance(t, ast.Name) and t.id == name]
    assert len(found) == 1, f"{name}: {len(found)} module-level assignments, not one"
    return found[0]


def catalog_targets(tree: ast.Module) -> set[str]:
    """Every "module:attribute" path of methods/catalog.py: those of every `MethodSpec(...)`
    (`params`, `kernel`, `after`; positionally the third and fourth arguments), which must be
    literal, and any other string of the file written as such a path (a field added later)."""
    names = _strings(tree)
    out = {text.partition(":")[0] for node in ast.walk(tree)
           if isinstance(node, ast.Constant | ast.JoinedStr)
           and (text := _text(node, names)) is not None and PATH.match(text)}  # fmt: skip
    specs = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "MethodSpec"]  # fmt: skip
    assert specs, "no MethodSpec(...) in methods/catalog.py"
    for spec in specs:
        given = [*spec.args[2:4], *(k.value for k in spec.keywords
                                    if k.arg in ("params", "kernel", "after"))]  # fmt: skip
        assert len(given) >= 2, f"a MethodSpec without its paths: {ast.unparse(spec)[:80]}"
        for node in given:
            if isinstance(node, ast.Constant) and node.value is None:
                continue
            path = _text(node, names)
            assert path is not None and PATH.match(path), (
                f"methods/catalog.py:{node.lineno}: not a literal 'reweighter.<module>:<name>' "
                f"path, so no contract could check it: {ast.unparse(node)}"
            )
            out.add(path.partition(":")[0])
    return out


def lazy_targets(tree: ast.Module) -> set[str]:
    """methods/__init__.py's `_LAZY` (public name -> module of the package): its literal
    values, written as `"name": "module"` or `**dict.fromkeys((names...), "module")`."""
    table, out = _assigned(tree, "_LAZY"), set()
    assert isinstance(table, ast.Dict), "_LAZY is not a dict literal"
    for key, value in zip(table.keys, table.values, strict=True):
        if key is None:  # **dict.fromkeys(names, "module")
            ok = (isinstance(value, ast.Call) and ast.unparse(value.func) == "dict.fromkeys"
                  and len(value.args) == 2)  # fmt: skip
            assert ok, f"_LAZY: not dict.fromkeys(names, 'module'): {ast.unparse(value)}"
            value = value.args[1]  # type: ignore[union-attr]
        assert isinstance(value, ast.Constant) and isinstance(value.value, str), ast.unparse(value)
        out.add(f"reweighter.methods.{value.value}")
    return out


def where_targets(tree: ast.Module) -> set[str]:
    """assembly/__init__.py's `_WHERE` (public name -> module, relative to the package)."""
    table = ast.literal_eval(_assigned(tree, "_WHERE"))
    return {importlib.util.resolve_name(f".{v}", "reweighter.assembly") for v in table.values()}


SITES: dict[tuple[str, str], Callable[[ast.Module], set[str]]] = {
    ("methods/catalog.py", "import_module(module)"): catalog_targets,
    ("methods/__init__.py", "import_module(f'{__name__}.{module}')"): lazy_targets,
    ("assembly/__init__.py", "importlib.import_module(f'.{_WHERE[name]}', __name__)"):
        where_targets,
}  # fmt: skip
"""(file in the package, the call as `ast.unparse` writes it) -> the reader of its table."""


def _called(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def sites(package: Path) -> dict[tuple[str, str], int]:
    """Every dynamic import call of the package: (file, call) -> its line."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("wire/_proto/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _called(node) in DYNAMIC:
                out[(rel, ast.unparse(node))] = node.lineno
    return out


def module_of(rel: str) -> str:
    parts = Path(rel).with_suffix("").parts
    return ".".join(("reweighter", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def edges(package: Path) -> set[tuple[str, str]]:
    """(importer, imported) for every import a registered site can make."""
    out = set()
    for (rel, _), read in SITES.items():
        tree = ast.parse((package / rel).read_text())
        out.update((module_of(rel), target) for target in read(tree))
    return out


def is_module(package: Path, dotted: str) -> bool:
    path = package.joinpath(*dotted.split(".")[1:])
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def config(dynamic: set[tuple[str, str]]) -> str:
    """The repository's contracts as a TOML file, each forbidden contract ignoring the dynamic
    imports that none of its source modules makes (see the module docstring)."""

    def inside(module: str, roots: list[str]) -> bool:
        return any(module == r or module.startswith(r + ".") for r in roots)

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(json.dumps(x) for x in v) + "]"
        return json.dumps(v)

    lines = ["[tool.importlinter]", 'root_package = "reweighter"',
             "include_external_packages = true"]  # fmt: skip
    for c in CONTRACTS:
        c = dict(c)
        if c["type"] == "forbidden":
            lazy = sorted(f"{a} -> {b}" for a, b in dynamic if not inside(a, c["source_modules"]))
            c["ignore_imports"] = [*c.get("ignore_imports", []), *lazy]
        lines += ["", "[[tool.importlinter.contracts]]"]
        lines += [f"{k} = {value(v)}" for k, v in c.items()]
    return "\n".join(lines) + "\n"


def check(package: Path, work: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on a copy of `package` with every dynamic import written out."""
    root = work / "written-out"
    shutil.copytree(package, root / "reweighter", ignore=shutil.ignore_patterns("__pycache__"))
    found = edges(root / "reweighter")
    by_importer: dict[str, list[str]] = {}
    for importer, target in sorted(found):
        by_importer.setdefault(importer, []).append(target)
    for importer, targets in by_importer.items():
        rel = [r for (r, _) in SITES if module_of(r) == importer][0]
        file = root / "reweighter" / rel
        body = "".join(f"    import {t}  # noqa\n" for t in targets)
        file.write_text(file.read_text() + f"\n\ndef _dynamic_imports() -> None:\n{body}")
    (work / "contracts.toml").write_text(config(found))
    return subprocess.run(
        [str(LINT), str(work / "contracts.toml"), "--no-cache"],
        cwd=work, env=_env(PYTHONPATH=str(root)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_every_dynamic_import_is_registered() -> None:
    found = sites(PACKAGE)
    unseen = {f"{rel}:{line}: {call}" for (rel, call), line in found.items()
              if (rel, call) not in SITES}  # fmt: skip
    assert not unseen, (
        "dynamic imports the import contract cannot see (write them as imports, or register "
        f"their table in SITES, tests/architecture/test_dynamic_imports.py): {sorted(unseen)}"
    )
    assert set(SITES) <= set(found), f"registered but gone: {set(SITES) - set(found)}"


def test_every_dynamic_import_names_a_module() -> None:
    found = edges(PACKAGE)
    assert {"reweighter.methods.dra", "reweighter.methods.params"} <= {b for _, b in found}
    assert ("reweighter.assembly", "reweighter.assembly.assembler") in found
    assert ("reweighter.methods", "reweighter.methods.similarity") in found
    gone = sorted(f"{a} -> {b}" for a, b in found if not is_module(PACKAGE, b))
    assert not gone, f"a table names a module that is not there: {gone}"


def test_the_contracts_hold_with_the_dynamic_imports_written_out(tmp_path: Path) -> None:
    run = check(PACKAGE, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert set(verdicts(run.stdout).values()) == {"KEPT"}
    assert len(verdicts(run.stdout)) == len(CONTRACTS)


LAYERS = contract(lambda c: c["type"] == "layers")

BREACHES = {
    # (file, text replaced, by, the import it makes) -> the layers contract breaks naming it
    "a catalogue kernel in a higher room": (
        "methods/catalog.py", '"reweighter.methods.dra:apply"', '"reweighter.api.http.app:apply"',
        "reweighter.methods.catalog -> reweighter.api.http.app",
    ),
    "an assembly name loaded from the service": (
        "assembly/__init__.py", '"AddOutcome": "machine"', '"AddOutcome": ".service"',
        "reweighter.assembly -> reweighter.service",
    ),
}  # fmt: skip


@pytest.mark.parametrize("breach", sorted(BREACHES))
def test_a_dynamic_import_that_breaks_a_layer_is_caught(breach: str, tmp_path: Path) -> None:
    rel, old, new, edge = BREACHES[breach]
    package = tmp_path / "reweighter"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    source = (package / rel).read_text()
    assert source.count(old) == 1, f"{rel} no longer holds {old}: update this breach"
    (package / rel).write_text(source.replace(old, new))
    run = check(package, tmp_path / "work")
    assert run.returncode != 0
    assert verdicts(run.stdout).get(LAYERS) == "BROKEN", run.stdout
    assert edge in " ".join(run.stdout.split()), run.stdout


def test_an_unregistered_or_reshaped_dynamic_import_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "reweighter"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    core = package / "engine" / "core.py"
    core.write_text(core.read_text() + '\n__import__("reweighter.api.http.app")\n')
    catalog = package / "methods" / "catalog.py"
    text = catalog.read_text()
    assert text.count("import_module(module)") == 1
    catalog.write_text(text.replace("import_module(module)", 'import_module("" + module)'))
    found = {key for key in sites(package) if key not in SITES}
    assert found == {
        ("engine/core.py", "__import__('reweighter.api.http.app')"),
        ("methods/catalog.py", "import_module('' + module)"),
    }


def test_a_table_that_is_not_literal_is_refused() -> None:
    tree = ast.parse(
        'from x import MethodSpec\nK = "reweighter.methods.dra"\n'
        'MethodSpec("m", "d", params=K + ":P", kernel="reweighter.methods.dra:apply")\n'
    )
    with pytest.raises(AssertionError, match="not a literal"):
        catalog_targets(tree)


def test_a_forbidden_contract_counts_its_own_modules_dynamic_imports() -> None:
    """Lazy loads elsewhere are not chains from a source module; the source module's own
    dynamic import is: it stays counted."""
    wire = contract(lambda c: "reweighter.wire" in c.get("source_modules", ()))
    text = config({("reweighter.wire.http", "torch"), ("reweighter.methods.catalog", "torch")})
    block = text.split(f'name = "{wire}"', 1)[1].split("[[tool.importlinter.contracts]]")[0]
    assert "reweighter.methods.catalog -> torch" in block
    assert "reweighter.wire.http -> torch" not in block


def test_a_path_in_a_field_added_later_is_read_too() -> None:
    tree = ast.parse(
        'P = "reweighter.methods.params"\n'
        'MethodSpec("m", "d", f"{P}:X", "reweighter.methods.dra:apply",\n'
        '           quality="reweighter.api.http.app:q")\n'
    )
    assert catalog_targets(tree) == {
        "reweighter.methods.params", "reweighter.methods.dra", "reweighter.api.http.app"
    }  # fmt: skip
