"""deploy/monitoring/grafana-dashboard.json: every panel query names only metrics the service
exports, read from a live service's /metrics after the traffic the panels plot (MMR groups with
answers and advantages, so every diversity histogram has samples)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from reweighter.client import ReweighterClient
from reweighter.config import Settings
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest

BOARD = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "grafana-dashboard.json"
NAME = re.compile(r"\b(reweighter_[a-z0-9_]+)")


def _queries(tenant: bool = False) -> list[str]:
    """The panels' queries; tenant=True: those of the `$tenant` panels (reweighter_tenant_*,
    exported only with a tenants file), else the others."""
    board = json.loads(BOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    return [e for e in exprs if ("$tenant" in e) == tenant]


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


def test_the_tenant_variable_lists_the_files_jobs_and_filters_their_panels(
    engine, tmp_path: Path
) -> None:
    """A service with a tenants file: the variable's query names an exported series whose
    `tenant` label holds the job that called, and every `$tenant` panel names exported series
    and filters on the variable."""
    board = json.loads(BOARD.read_text())
    (var,) = [v for v in board["templating"]["list"] if v["name"] == "tenant"]
    assert var["includeAll"] and var["multi"]
    found = re.fullmatch(r"label_values\((reweighter_[a-z_]+), tenant\)", var["query"]["query"])
    assert found, var["query"]
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"tenants": [{"name": "job-a", "key": "key-of-job-a-01"}]}))
    settings = Settings(host="127.0.0.1", http_port=0, grpc_port=0, tenants=str(tenants))
    with BackgroundService(settings, engine) as svc:
        group = Group([1.0, 0.0], embeddings=[[1.0, 0.0], [0.0, 1.0]], answers=["4", "5"])
        with ReweighterClient(svc.http_url, api_key="key-of-job-a-01") as http:
            http.reweight(ReweightRequest(groups=[group], method="dra", step=1))
        text = httpx.get(f"{svc.http_url}/metrics").text
    assert re.search(rf'^{found[1]}{{[^}}]*tenant="job-a"', text, re.M), found[1]
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    queries = _queries(tenant=True)
    assert len(queries) >= 3
    for expr in queries:
        assert 'tenant=~"$tenant"' in expr, expr
        missing = [n for n in NAME.findall(expr) if n not in exported]
        assert not missing, (expr, missing)
