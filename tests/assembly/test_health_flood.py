"""Health never waits on assembly (issue 29 point 3), from outside: bench/bench_health_flood.py
as documented, smaller (3,000 members of never-completing groups over 300 keep-alive
connections, timeout_s 2, against `reweighter serve` with its defaults), run by the suite in a
fresh process. /healthz and /readyz, asked every 50 ms from another process, answer 200 within
1 s every time; every member is answered; the server's RSS grows less than 300 MB. Before the
members were paced (assembly/pace.py), this flood held /healthz for seconds on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_health_flood.py"


@pytest.mark.slow
def test_health_answers_within_a_second_under_an_assembly_flood(tmp_path: Path) -> None:
    out = tmp_path / "flood.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--members", "3000", "--connections", "300", "--out",
         str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    print(run.stdout)
    got = json.loads(out.read_text())
    assert got["counts"] == {**got["counts"], "answered": 3000, "short": 3000, "other": 0}
    flooded = got["flooded"]
    assert flooded["not_200"] == 0
    assert len(flooded["lat"]["/healthz"]) >= 20  # the probes kept coming during the flood
    for path in ("/healthz", "/readyz"):
        assert max(flooded["lat"][path]) < 1000, (path, sorted(flooded["lat"][path])[-5:])
    rss0, rss1 = got["rss_mb"]
    assert rss1 - rss0 < 300
