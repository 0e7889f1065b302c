"""docs/cost.md, "Where it runs and what it costs": every figure of its table names its source
(a history section of BENCHMARKS-HISTORY.md, or "not measured"), the GPU rows say they are not
measured, the memory it quotes is the history's, and the command it gives for workers on other
nodes is run as written: `reweighter serve` bound on every address, answering only with the key."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import httpx
import pytest

from reweighter.launch import serve

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "cost.md").read_text()
HISTORY = (ROOT / "BENCHMARKS-HISTORY.md").read_text()


def _rows() -> list[list[str]]:
    table = PAGE.split("## The table", 1)[1].split("\n\n", 2)[2]
    lines = [ln for ln in table.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def _ids() -> set[str]:
    return set(re.findall(r"^## ([A-Z]{1,2}\d?|\d+[a-z]?)\. ", HISTORY, re.M))


def test_every_figure_names_its_source() -> None:
    rows = _rows()
    devices = {r[0] for r in rows}
    assert len(devices) == 3 and any("CPU" in d for d in devices), devices
    assert {"one GPU shared with the policy", "a GPU of its own"} <= devices
    for device, _, _, seconds, memory, change in rows:
        cited = set(re.findall(r"history ([A-Z]{1,2}\d?)", seconds + memory))
        cited |= set(re.findall(r"\((?:[^()]*, )?([A-Z]{2})\)", seconds + memory))
        assert cited <= _ids(), cited - _ids()
        assert cited or "not measured" in seconds, seconds
        assert change, device
        if "GPU" in device:
            assert seconds.startswith("**not measured**") and memory.startswith("not measured")


def test_the_memory_quoted_is_the_historys() -> None:
    section = HISTORY.split("\n## AC. ", 1)[1].split("\n## ", 1)[0]
    quoted = [re.findall(r"(\d+) MB", r[4]) for r in _rows() if "(AC)" in r[4]]
    assert sum(quoted, []), "no memory quoted from history AC"
    for figure in sum(quoted, []):
        assert re.search(rf"\b{figure}\b", section), figure


@pytest.mark.server
def test_the_command_for_other_nodes_binds_every_address_and_wants_the_key() -> None:
    block = PAGE.split("<!-- other-nodes:", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    key = "key-for-the-other-nodes-0123456789"
    words = shlex.split(os.path.expandvars(block.replace("$REWEIGHTER_API_KEY", key)))
    assert words[:2] == ["reweighter", "serve"] and key in words
    with serve(*words[2:]) as served:
        assert re.search(r"serving HTTP on 0\.0\.0\.0:\d+ and gRPC on 0\.0\.0\.0:\d+", served.log())
        assert httpx.get(f"{served.url}/v1/info", timeout=10).status_code == 401
        auth = {"authorization": f"Bearer {key}"}
        assert httpx.get(f"{served.url}/v1/info", headers=auth, timeout=10).status_code == 200
