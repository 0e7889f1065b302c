"""bench/aiperf.sh, the documented third-party load-generator command, run as written (small):
AIPerf (set up once in .bench-venv) against `reweighter serve`'s /v1/embeddings, our client and
plain encode(32) in one run, one row each. Slow: a venv of its own (the first run installs aiperf
from the registry: minutes) and a `reweighter serve` child."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.venv
@pytest.mark.server
@pytest.mark.timeout(1500)
def test_the_documented_aiperf_command_prints_three_rows() -> None:
    out = subprocess.run(
        ["bash", "bench/aiperf.sh", "--n", "32"],
        cwd=ROOT, capture_output=True, text=True, timeout=1400,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "load average before:" in out.stdout and "load average after:" in out.stdout
    rows = re.findall(r"^\| (.+?) \| ([0-9.]+) \| ([0-9.]+)x \|", out.stdout, re.M)
    names = [r[0] for r in rows]
    assert len(rows) == 3 and names[1].startswith("AIPerf"), out.stdout
    assert all(float(r[1]) > 0 for r in rows) and rows[2][2] == "1.00"
    assert "bash bench/aiperf.sh" in (ROOT / "BENCHMARKS.md").read_text()
