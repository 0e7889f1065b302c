"""bench/ holds benchmarks at its top and sorts the rest into folders that say what they are:
lib/ (helpers the benchmarks import), gpu/ (runners for a lent GPU machine and the carries they
need), tools/ (calibration). A helper dropped beside the benchmarks fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
FOLDERS = {"lib", "gpu", "tools", "out"}  # out/: results, git-ignored


def test_the_top_of_bench_holds_benchmarks_only() -> None:
    others = [p.name for p in BENCH.iterdir() if p.is_file()
              and not (p.name.startswith("bench_") and p.suffix == ".py")
              and p.name != "aiperf.sh"]  # fmt: skip
    assert not others, f"not a benchmark, belongs in one of {sorted(FOLDERS)}: {others}"
    folders = {p.name for p in BENCH.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= FOLDERS, folders - FOLDERS


def test_gpu_runners_live_in_gpu() -> None:
    assert sorted(p.name for p in (BENCH / "gpu").glob("gpu_*.sh")) == [
        "gpu_carry.sh", "gpu_check.sh", "gpu_control.sh", "gpu_experiment.sh",
        "gpu_experiment_carry.sh", "gpu_wordadd.sh"]  # fmt: skip


BENCHMARKS = BENCH.parent / "BENCHMARKS.md"
HISTORY = BENCH.parent / "BENCHMARKS-HISTORY.md"
AREAS = ("First contact", "Fairness", "The host path", "Long completions", "Methods",
         "`/v1/reweight` latency", "Group assembly", "Client CPU", "Health under an assembly flood",
         "The three services", "Tenants", "AIPerf", "GPU rows", "Precision",
         "A long run")  # fmt: skip
MACHINES = ("Zen 3", "Zen 4", "Xeon", "EPYC", "H200", "H100")
"""The machines BENCHMARKS.md describes under **Machines**; a figure names the one it ran on."""
SECTION = re.compile(r"^## (?:([A-Z]{1,2}\d?|\d+[a-z]?)\. )?(.*)$", re.M)
"""A history section's heading: `## Q. What was asked`; its letter or number is its id."""


def current() -> str:
    text = BENCHMARKS.read_text()
    figures, _, index = text.partition("\n# History\n")
    assert index, "no '# History' part (the index of BENCHMARKS-HISTORY.md)"
    return figures


def areas() -> dict[str, str]:
    """Area -> the text of its current section."""
    sections = current().split("\n### ")[1:]
    out = {}
    for area in AREAS:
        found = [s for s in sections if area in s.splitlines()[0]]
        assert found, f"no current table for {area!r}"
        out[area] = found[0]
    return out


def slugs(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading's anchor numbered (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.*)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def index() -> list[tuple[str, str]]:
    """(id or "targets", anchor) for each row of BENCHMARKS.md's history index."""
    part = BENCHMARKS.read_text().partition("\n# History\n")[2]
    return re.findall(r"^\| \[([\w]+)\]\(BENCHMARKS-HISTORY\.md#([\w-]+)\) \|", part, re.M)


def test_benchmarks_lead_with_one_current_table_per_area() -> None:
    """BENCHMARKS.md: the current figure of each area (a table under each area's heading),
    naming its machine; the history in BENCHMARKS-HISTORY.md; a new area gets its table too."""
    for area, text in areas().items():
        assert "\n|---" in text, f"{area!r} has no table"
        assert any(m in text for m in MACHINES), f"{area!r} names none of {MACHINES}"
    described = current().split("**Machines.**", 1)[1].split("\n\n", 1)[0]
    assert all(m in described for m in MACHINES), described


def test_the_history_is_its_own_file_and_every_link_to_it_resolves() -> None:
    """Each section of the history is in BENCHMARKS.md's index once, linked to its heading;
    every link into the history resolves; the history holds no current-figures part."""
    history = HISTORY.read_text()
    headings = SECTION.findall(history)
    assert len(headings) > 25, "the history has lost its sections"
    anchors = [a for _, a in index()]
    assert len(anchors) == len(headings) == len(set(anchors)), (len(anchors), len(headings))
    assert [i for i, _ in index()] == [i or "targets" for i, _ in headings]
    links = re.findall(r"\]\(BENCHMARKS-HISTORY\.md#([\w-]+)\)", BENCHMARKS.read_text())
    assert set(links) <= slugs(history), set(links) - slugs(history)
    assert "## Current figures" not in history and "\n# History\n" not in history


def test_every_history_section_a_current_table_cites_exists() -> None:
    """The letters in the current tables' `history` column and in "history X, Y" name
    sections of the history ("Q", "3b", "T2")."""
    ids = {i for i, _ in index()}
    cited = set()
    for area, text in areas().items():
        rows = [r.strip("|").split("|") for r in text.splitlines() if r.startswith("|")]
        if rows and rows[0][-1].strip() == "history":
            cited.update((area, c.strip()) for r in rows[2:] for c in r[-1].split(","))
        for names in re.findall(r"\bhistory ((?:\w+)(?:, \w+)*)", text):
            cited.update((area, c.strip()) for c in names.split(","))
        assert any(a == area for a, _ in cited), f"{area!r} cites no history section"
    unknown = sorted(f"{a}: {c}" for a, c in cited if c not in ids)
    assert not unknown, f"cited but not a history section: {unknown}"


@pytest.mark.parametrize("path", [BENCHMARKS, HISTORY], ids=lambda p: p.name)
def test_benchmarks_name_what_was_asked_not_issue_numbers(path: Path) -> None:
    """A reader has no issue tracker: a section says what was asked ("asked: ..."), not its
    number."""
    hits = re.findall(r".{0,30}\bissues? ?-?#?\d+.{0,30}", path.read_text(), re.I)
    assert not hits, hits
