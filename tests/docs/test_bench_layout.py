"""bench/ holds benchmarks at its top and sorts the rest into folders that say what they are:
lib/ (helpers the benchmarks import), gpu/ (runners for a lent GPU machine and the carries they
need), tools/ (calibration). A helper dropped beside the benchmarks fails here."""

from __future__ import annotations

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
