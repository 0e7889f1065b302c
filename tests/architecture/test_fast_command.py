"""`bash scripts/test.sh --fast`, as the README gives it: it deselects what pyproject's markers
call slow (marked by hand, or by the fixtures a test uses: tests/conftest.py), and an unmarked
test that takes longer than the limit fails, saying how to mend it.

Run on a throwaway test file with the suite's conftest as a plugin, so the check costs one
small pytest process, not a collection of the suite."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = """
import time

import pytest


@pytest.fixture
def private_redis():  # the name of tests/hardening's Redis of its `reweighter serve` children
    return 1


def test_uses_a_server(private_redis):
    pass


@pytest.mark.docker
def test_needs_docker():
    pass


@pytest.mark.slow
def test_marked_slow():
    pass


def test_quick():
    pass


def test_slow_but_unmarked():
    time.sleep(0.6)
"""


def run_fast(tmp_path: Path, limit_s: str) -> subprocess.CompletedProcess[str]:
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    env = {
        **os.environ,
        "REWEIGHTER_SKIP_SETUP": "1",  # this .venv is set up: the suite runs in it
        "REWEIGHTER_UNMARKED_LIMIT_S": limit_s,
        "PYTHONPATH": str(ROOT / "tests"),  # `-p conftest`: the suite's hooks on the sample
    }
    argv = ["bash", "scripts/test.sh", "--fast", "-c", "pyproject.toml", "--rootdir", str(ROOT),
            "-p", "conftest", "-p", "no:cacheprovider", "-rA", str(sample)]  # fmt: skip
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.process  # runs scripts/test.sh (ruff over the repo, a pytest run): 5-20 s here
def test_fast_deselects_slow_kinds_and_fails_a_slow_unmarked_test(tmp_path: Path) -> None:
    done = run_fast(tmp_path, "0.3")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert re.search(r"1 failed, 1 passed, 3 deselected", out), out
    assert "PASSED" in out and "test_quick" in out
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and "test_slow_but_unmarked" in failed[0], out
    assert "mark it slow" in out and "or make it faster" in out, out
    assert "slowest" in out  # --durations=25


def test_readme_gives_the_fast_command_beside_the_full_one() -> None:
    readme = (ROOT / "README.md").read_text()
    full, fast = readme.find("bash scripts/test.sh\n"), readme.find("bash scripts/test.sh --fast")
    assert full >= 0 and fast >= 0 and abs(fast - full) < 600, "README: both commands, together"
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("exec bash scripts/test.sh")
