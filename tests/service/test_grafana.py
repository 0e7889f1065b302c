"""deploy/monitoring/grafana-dashboard.json: every panel query names only metrics the service
exports, read from a live service's /metrics after the traffic the panels plot (MMR groups with
answers and advantages, so every diversity histogram has samples)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from reweighter.client import ReweighterClient
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest

BOARD = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "grafana-dashboard.json"
NAME = re.compile(r"\b(reweighter_[a-z0-9_]+)")


def _queries() -> list[str]:
    board = json.loads(BOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


def _exported(url: str) -> set[str]:
    """Sample names /metrics exports (histograms' _bucket/_sum/_count, counters' _total)."""
    text = httpx.get(f"{url}/metrics").text
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}


def test_every_query_names_an_exported_metric(service: BackgroundService, http: ReweighterClient):
    group = Group(
        rewards=[1.0, 0.0, 1.0],
        completions=["It is 4.", "It is 5.", "Four."],
        answers=["4", "5", "4"],
    )
    http.reweight(ReweightRequest(groups=[group], method="mmr", advantages="grpo", step=1))
    exported = _exported(service.http_url)
    queries = _queries()
    assert len(queries) >= 9
    named = set()
    for expr in queries:
        names = NAME.findall(expr)
        assert names, f"a query naming no reweighter metric: {expr}"
        missing = [n for n in names if n not in exported]
        assert not missing, (expr, missing)
        named.update(names)
    for figure in ("distinct_answers", "effective_size", "mean_similarity", "lambda"):
        assert any(n.startswith(f"reweighter_group_{figure}_") for n in named), figure
    assert any("zero_advantage_share" in n for n in named)
    assert any("request_duration_seconds" in n for n in named)
