"""docs/architecture.md is the map of the package, and this holds it to the package as it is.

Why: the map drifted (modules added over several passes were never named on it, a moved one
kept its old path), and a map a new maintainer cannot trust is worse than none. So the page's
"Every module" table has exactly one row per module of `services/reweighter/reweighter/`
(the generated gRPC stubs: one row, `wire/_proto/`), and every path of a room that the page
names anywhere, in a row or in its prose, exists. The rule is read from the files on disk, so
a module added, moved or removed fails here until its row follows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "services" / "reweighter" / "reweighter"
PAGE = REPO / "docs" / "architecture.md"
HEADING = "## Every module"
GENERATED = ("wire/_proto/",)
"""Folders of generated code: one row for all that is in them."""
ROW = re.compile(r"^\| `([\w./-]+)` \| (.*?) \|$")


def modules(package: Path) -> set[str]:
    """Every module of `package` as its path inside it (`api/http/app.py`); the files of a
    generated folder as that folder."""
    out = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).as_posix()
        if "__pycache__" in rel:
            continue
        out.add(next((g for g in GENERATED if rel.startswith(g)), rel))
    return out


def table(page: str) -> list[tuple[str, str]]:
    """(path, what it holds) for each row of the page's module table, in page order; a line of
    the table that is not a row of that form fails."""
    assert f"\n{HEADING}\n" in page, f"docs/architecture.md has no {HEADING!r} section"
    section = page.split(f"\n{HEADING}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert lines[:2] == ["| module | what it holds |", "|---|---|"], lines[:2]
    rows = []
    for line in lines[2:]:
        m = ROW.match(line)
        assert m, f"not a row of the form | `path` | what it holds |: {line!r}"
        rows.append((m.group(1), m.group(2).strip()))
    return rows


def rooms(package: Path) -> list[str]:
    return sorted(p.name for p in package.iterdir() if (p / "__init__.py").exists())


def cited(page: str, package: Path) -> set[str]:
    """Paths that start with a room of the package (`api/http/app.py`, `embedding/plan/`), as
    the page writes them anywhere; `tests/assembly/...` or `services/...` are not the
    package's and are test_citations' business."""
    room = "|".join(map(re.escape, rooms(package)))
    found = re.findall(rf"(?<![\w./-])((?:{room})/(?:[\w-]+/)*(?:[\w-]+\.py)?)(?![\w/-])", page)
    return set(found)


def drift(page: str, package: Path) -> dict[str, list[str]]:
    """What keeps the page from being the package's map, by kind (empty lists: none)."""
    rows = table(page)
    named = [path for path, _ in rows]
    have = modules(package)
    return {
        "modules with no row": sorted(have - set(named)),
        "rows naming no module": sorted(set(named) - have),
        "rows given twice": sorted({p for p in named if named.count(p) > 1}),
        "rows out of path order": [a for a, b in zip(named, named[1:], strict=False) if a > b],
        "rows that say nothing": [p for p, what in rows if not what or what == "TODO"],
        "paths named that are not there": sorted(
            p for p in cited(page, package) if not (package / p).exists()
        ),
    }


def test_the_page_is_the_packages_map() -> None:
    found = drift(PAGE.read_text(), PACKAGE)
    problems = {kind: paths for kind, paths in found.items() if paths}
    assert not problems, (
        f"docs/architecture.md ({HEADING!r}) and the package disagree: {problems}; a row is "
        "| `path inside services/reweighter/reweighter/` | what it holds |, in path order"
    )
    assert len(table(PAGE.read_text())) > 100


SAMPLE = f"""# A package

The rooms: `api/` and `engine/core.py`.

{HEADING}

| module | what it holds |
|---|---|
| `api/__init__.py` | the package |
| `api/app.py` | the app |
| `engine/__init__.py` | the engine's package |
| `engine/core.py` | the engine |

## After
"""


@pytest.fixture
def package(tmp_path: Path) -> Path:
    for rel in ("api/__init__.py", "api/app.py", "engine/__init__.py", "engine/core.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text('"""A module."""\n')
    return tmp_path


def test_a_true_map_passes(package: Path) -> None:
    assert not any(drift(SAMPLE, package).values())


def test_a_new_module_without_a_row_fails(package: Path) -> None:
    (package / "api" / "edge.py").write_text("")
    assert drift(SAMPLE, package)["modules with no row"] == ["api/edge.py"]


def test_a_row_whose_module_is_gone_fails(package: Path) -> None:
    (package / "api" / "app.py").unlink()
    assert drift(SAMPLE, package)["rows naming no module"] == ["api/app.py"]


def test_a_moved_module_named_in_the_prose_fails(package: Path) -> None:
    """The row follows the move, the prose does not: the old path is still named."""
    (package / "engine" / "core.py").rename(package / "engine" / "kernel.py")
    page = SAMPLE.replace(
        "| `engine/core.py` | the engine |", "| `engine/kernel.py` | the engine |"
    )
    found = drift(page, package)
    assert found["paths named that are not there"] == ["engine/core.py"]
    assert not found["modules with no row"] and not found["rows naming no module"]


def test_rows_out_of_order_twice_or_empty_fail(package: Path) -> None:
    page = SAMPLE.replace(
        "| `api/app.py` | the app |",
        "| `engine/core.py` | TODO |\n| `api/app.py` | the app |",
    )
    found = drift(page, package)
    assert found["rows given twice"] == ["engine/core.py"]
    assert found["rows out of path order"] == ["engine/core.py"]
    assert found["rows that say nothing"] == ["engine/core.py"]


def test_a_malformed_row_fails(package: Path) -> None:
    page = SAMPLE.replace("| `api/app.py` | the app |", "| api/app.py | the app |")
    with pytest.raises(AssertionError, match="not a row"):
        drift(page, package)
