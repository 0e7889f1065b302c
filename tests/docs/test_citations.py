"""What the docs and docstrings cite exists: a file path (`assembly/openrlhf.py`,
`tests/embedding/test_plan.py`, a folder `tests/service/`) names a file or folder of the repository,
and a dotted name of the package (`reweighter.client.connect`) imports. A path is resolved as
written from the repository root, or as the tail of a tracked path (`records.py`,
`assembly/records.py`): a renamed or moved file fails here until its citations follow."""

from __future__ import annotations

import importlib
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|md|proto|sh|yaml|yml))(?![\w/])")
FOLDER = re.compile(
    r"(?<![\w./-])((?:tests|docs|bench|scripts|deploy|services|trainer|research)/[\w/-]*)")
NAME = re.compile(r"(?<![\w.])(reweighter(?:_trainer|_research)?(?:\.[A-Za-z_]\w*)+)")
# where each package's sources live (the research harness and the benchmarks are sources too)
PACKAGES = {"reweighter": "services/reweighter", "reweighter_trainer": "trainer",
            "reweighter_research": "research"}  # fmt: skip
# Files of other projects (and placeholders) cited on purpose: not this repository's.
FOREIGN = ("ray_trainer.py", "verl/verl/utils/reward_score/partition_reward_vllm_serve.py",
           "code/passk_adv.py", "recipes/dra_grpo.yaml", "recipes/mmr_grpo.yaml",
           "a/__init__.py", "a/b/__init__.py", "FILE.yaml", "tenants.yaml",
           "my_score.py")  # fmt: skip


@cache
def tracked() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return tuple(out.stdout.split())


TOP_DOCS = ("README.md", "BENCHMARKS.md", "BENCHMARKS-HISTORY.md", "EXPERIMENTS.md")


def sources() -> list[Path]:
    keep = ("services/reweighter/reweighter/", "trainer/reweighter_trainer/",
            "research/reweighter_research/", "bench/", "docs/")
    return [ROOT / p for p in tracked()
            if (p.startswith(keep) and p.endswith((".py", ".md", ".sh")) and "/_proto/" not in p)
            or p in TOP_DOCS]  # fmt: skip


@cache
def tails() -> frozenset[str]:
    """Every tracked path and each of its tails (`assembly/records.py`, `records.py`)."""
    out = set()
    for p in tracked():
        parts = p.split("/")
        out.update("/".join(parts[i:]) for i in range(len(parts)))
    return frozenset(out)


def path_exists(cited: str) -> bool:
    return cited in FOREIGN or cited in tails() or (ROOT / cited).exists()


def folder_exists(cited: str) -> bool:
    if cited in (ROOT / ".gitignore").read_text().split():  # an output folder (bench/out/)
        return True
    cited = cited.rstrip("/")
    return any(p == cited or p.startswith(cited + "/") for p in tracked())


def name_exists(dotted: str) -> bool:
    """A name of a module of the package and what it defines. `reweighter.<x>` where x is no
    module of it is another kind of name (the trainer's `reweighter.method` config key, the
    proto package `reweighter.v1`): not checked here."""
    parts = dotted.split(".")
    package = ROOT / PACKAGES[parts[0]] / parts[0]
    if not ((package / parts[1]).is_dir() or (package / f"{parts[1]}.py").exists()):
        return True
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def citations() -> list[tuple[str, str, str]]:
    """(kind, citing file, cited) for every citation in the sources."""
    found = set()
    for src in sources():
        text = src.read_text()
        rel = str(src.relative_to(ROOT))
        for m in PATH.finditer(text):  # lstrip: a shell default, `${CONFIG:-research/x.yaml}`
            found.add(("path", rel, m.group(1).lstrip("-")))
        for m in FOLDER.finditer(text):
            if m.group(1).endswith("/"):
                found.add(("folder", rel, m.group(1)))
        for m in NAME.finditer(text):
            found.add(("name", rel, m.group(1).rstrip(".")))
    return sorted(found)


def test_cited_paths_and_names_exist() -> None:
    missing = []
    for kind, rel, cited in citations():
        ok = {"path": path_exists, "folder": folder_exists, "name": name_exists}[kind](cited)
        if not ok:
            missing.append(f"{rel}: {kind} {cited}")
    assert not missing, "cited but not there:\n" + "\n".join(missing)


def test_docs_cite_nothing_outside_the_repository() -> None:
    """The design card lives outside the repository: citing it sends a reader nowhere."""
    bad = [str(p.relative_to(ROOT)) for p in sources() if "DESIGN principle" in p.read_text()]
    assert not bad, bad


@pytest.mark.parametrize("cited", ["assembly/no_such_room.py", "tests/nowhere/"])
def test_a_missing_citation_is_caught(cited: str) -> None:
    assert not (path_exists(cited) if cited.endswith(".py") else folder_exists(cited))
