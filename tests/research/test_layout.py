"""Research stays apart from the product: the experiment harness (research/, `reweighter_research`)
imports the trainer and the client, and nothing the product ships imports the harness back. The
service's import contract (pyproject's [tool.importlinter]) covers `reweighter` only; this covers
the two packages beside it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = [REPO / "services" / "reweighter" / "reweighter", REPO / "trainer" / "reweighter_trainer"]
HARNESS = [
    "experiment", "decision", "verdicts", "control", "resolution", "gate", "plots", "metrics"
]


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_no_product_module_imports_the_research_package():
    offenders = [
        f"{path.relative_to(REPO)}: {name}"
        for root in PRODUCT
        for path in sorted(root.rglob("*.py"))
        for name in _imported(path)
        if name.split(".")[0] == "reweighter_research"
    ]
    assert not offenders, offenders


@pytest.mark.parametrize("name", HARNESS)
def test_the_harness_lives_in_research_only(name):
    module = importlib.import_module(f"reweighter_research.{name}")
    assert Path(module.__file__).resolve().parent == REPO / "research" / "reweighter_research"
    assert not (REPO / "trainer" / "reweighter_trainer" / f"{name}.py").exists()


def test_task_configs_live_with_the_research():
    configs = {p.name for p in (REPO / "research" / "configs").glob("*.yaml")}
    assert {"smollm2-pickone.yaml", "smollm2-picktwo.yaml", "smollm2-wordadd.yaml"} <= configs
