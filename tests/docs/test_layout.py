"""README's "Layout" block is the tree (issue 29 point 9: it listed an `integrations/openrlhf`
that never existed, and missed rooms that did).

Each entry of the block names a path at the top of the repository; the names in its
description (`name/`, `name.py`, `name.proto`) are paths inside it, or inside the Python
package of the same name (services/reweighter/ -> reweighter/). Every one must exist. And the
other way: every subpackage of `reweighter`, every test directory and every deploy/ directory
is named, and the integrations listed are exactly the adapter modules.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "services" / "reweighter" / "reweighter"


def layout() -> dict[str, str]:
    """Top-level path -> its description (continuation lines joined)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    last = None
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        if line[0] != " ":
            last, _, text = line.partition(" ")
            entries[last] = text.strip()
        else:
            assert last is not None, line
            entries[last] += " " + line.strip()
    return entries


LAYOUT = layout()


def names(text: str) -> list[str]:
    """`dir/`, `dir/sub/` and `file.ext` tokens of a description (not URLs or `(+ ...)`)."""
    return re.findall(r"(?<![\w/.-])((?:[\w-]+/)+|[\w-]+\.(?:py|proto|yml|yaml|toml))(?![\w/])",
                      text)  # fmt: skip


def roots(entry: str) -> list[Path]:
    base = ROOT / entry
    inner = base / base.name
    return [base, inner] if (inner / "__init__.py").exists() else [base]


def test_every_top_level_entry_exists() -> None:
    assert {"proto/", "services/reweighter/", "trainer/", "tests/", "bench/"} <= LAYOUT.keys()
    for entry in LAYOUT:
        path = ROOT / entry
        assert path.is_dir() if entry.endswith("/") else path.is_file(), entry


def test_every_name_in_a_description_exists() -> None:
    checked = 0
    for entry, text in LAYOUT.items():
        if not entry.endswith("/"):
            continue
        for name in names(text):
            checked += 1
            assert any((r / name).exists() for r in roots(entry)), f"{entry}: {name}"
    assert checked > 20


def test_every_room_is_named() -> None:
    def named(entry: str) -> set[str]:
        return {n.rstrip("/") for n in names(LAYOUT[entry])}

    package = named("services/reweighter/")
    rooms = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert rooms - {n.split("/")[0] for n in package} == set(), "rooms of `reweighter` unnamed"
    api = {p.parent.name for p in (PACKAGE / "api").glob("*/__init__.py")} - {"_proto"}
    assert {f"api/{a}" for a in api} <= package, "api/ subpackages unnamed"
    tests = {p.parent.name for p in (ROOT / "tests").glob("*/*.py")}
    assert tests - named("tests/") == set(), "test directories unnamed"
    deploy = {p.name for p in (ROOT / "deploy").iterdir() if p.is_dir()}
    assert deploy - named("deploy/") == set(), "deploy/ directories unnamed"


def test_the_integrations_listed_are_the_adapters() -> None:
    text = LAYOUT["services/reweighter/"]
    listed = re.search(r"integrations/ \(([^)]*)\)", text)
    assert listed is not None
    modules = {p.stem for p in (PACKAGE / "integrations").glob("*.py")} - {"__init__"}
    public = {m for m in modules if not m.startswith("_")}
    assert {n.strip() for n in listed.group(1).split(",")} == public
