"""The README's first command, as written: `bash scripts/demo.sh` prints the table the README
shows (same rows, numbers within 0.01: another CPU's float rounding may move the third digit)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^(copy \d|wrong|distinct correct)\s+(-?\d+\.\d+(?:\s+-?\d+\.\d+){3})\s*$")


def _rows(text: str) -> dict[str, list[float]]:
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line.strip())
        if m:
            rows[m.group(1)] = [float(x) for x in m.group(2).split()]
    return rows


@pytest.mark.process
def test_demo_prints_the_readme_table() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("`bash scripts/demo.sh` prints", 1)[1].split("```text", 1)[1]
    block = block.split("```", 1)[0]
    documented = _rows(block)
    assert len(documented) == 8, "the README's demo table lost rows"

    done = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    printed = _rows(done.stdout)
    assert printed.keys() == documented.keys()
    for name, want in documented.items():
        got = printed[name]
        assert all(abs(a - b) <= 0.01 for a, b in zip(got, want, strict=True)), (name, got, want)
    assert "HTTP and gRPC answers identical: True" in done.stdout
    # MMR's first place goes to the path the group lacks, not to a copy by position.
    mmr = {name: row[3] for name, row in printed.items()}
    assert max(mmr, key=mmr.get) == "distinct correct"
