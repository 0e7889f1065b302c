"""bench/ holds benchmarks at its top and sorts the rest into folders that say what they are:
lib/ (helpers the benchmarks import), gpu/ (runners for a lent GPU machine and the carries they
need), tools/ (calibration). A helper dropped beside the benchmarks fails here."""

from __future__ import annotations

import re
from pathlib import Path

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
        "gpu_carry.sh", "gpu_check.sh", "gpu_experiment.sh", "gpu_experiment_carry.sh",
        "gpu_wordadd.sh"]  # fmt: skip


BENCHMARKS = BENCH.parent / "BENCHMARKS.md"
AREAS = ("First contact", "Fairness", "The host path", "Long completions", "Methods",
         "`/v1/reweight` latency", "Group assembly", "Client CPU", "Health under an assembly flood",
         "The three services", "Tenants", "AIPerf", "GPU rows", "Precision")  # fmt: skip


def test_benchmarks_lead_with_one_current_table_per_area() -> None:
    """BENCHMARKS.md: the current figure of each area first (a table under each area's heading),
    the history after it; a new area gets its current table too."""
    text = BENCHMARKS.read_text()
    current, _, history = text.partition("\n# History\n")
    assert history, "no '# History' part"
    sections = current.split("\n### ")[1:]
    for area in AREAS:
        found = [s for s in sections if area in s.splitlines()[0]]
        assert found, f"no current table for {area!r}"
        assert "\n|---" in found[0], f"{area!r} has no table"


def test_benchmarks_name_what_was_asked_not_issue_numbers() -> None:
    """A reader has no issue tracker: a section says what was asked ("asked: ..."), not its
    number."""
    hits = re.findall(r".{0,30}\bissues? ?-?#?\d+.{0,30}", BENCHMARKS.read_text(), re.I)
    assert not hits, hits
