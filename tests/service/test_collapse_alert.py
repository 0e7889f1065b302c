"""The collapse alert of docs/operations.md, evaluated on a live service's /metrics.

The rule block is read from the doc as written (and parsed as YAML, as Prometheus would); its
expression `histogram_quantile(q, sum by (le) (rate(M_bucket[w]))) <= x` is evaluated here on the
difference of two scrapes (what `rate` sees over the window, up to the window's length, which
`histogram_quantile` cancels), with Prometheus's linear interpolation inside a bucket. A workload
of collapsed groups (one answer each) fires it; a diverse one does not.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import httpx
import yaml

from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
EXPR = re.compile(
    r"histogram_quantile\(([0-9.]+), sum by \(le\) \(rate\((\w+)_bucket\[\w+\]\)\)\) <= ([0-9.]+)"
)


def _rule() -> tuple[float, str, float]:
    text = DOC.read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    rule = yaml.safe_load(block)["groups"][0]["rules"][0]
    assert rule["alert"] == "ReweighterAnswerCollapse" and rule["for"] == "30m"
    m = EXPR.fullmatch(rule["expr"])
    assert m, rule["expr"]
    return float(m[1]), m[2], float(m[3])


def _buckets(url: str, metric: str) -> dict[float, float]:
    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        m = re.fullmatch(rf'{metric}_bucket{{le="([^"]+)"}} (\S+)', line)
        if m:
            out[math.inf if m[1] == "+Inf" else float(m[1])] = float(m[2])
    assert out, f"{metric} is not on /metrics"
    return out


def _quantile(q: float, cumulative: dict[float, float]) -> float:
    """Prometheus's histogram_quantile on cumulative bucket counts."""
    les = sorted(cumulative)
    total = cumulative[math.inf]
    assert total > 0
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le in les:
        if cumulative[le] >= rank:
            if le == math.inf:
                return prev_le
            span = cumulative[le] - prev_count
            return prev_le + (le - prev_le) * ((rank - prev_count) / span if span else 0)
        prev_le, prev_count = le, cumulative[le]
    return prev_le


def _window(service: BackgroundService, engine: ReweightEngine, metric: str, answers: list[str]):
    before = _buckets(service.http_url, metric)
    groups = [
        Group(
            rewards=[1.0] * len(answers),
            embeddings=[[1.0, float(i)] for i in range(len(answers))],
            answers=answers,
        )
        for _ in range(20)
    ]
    engine.reweight(ReweightRequest(groups=groups, method="darling"))
    after = _buckets(service.http_url, metric)
    return {le: after[le] - before.get(le, 0.0) for le in after}


def test_the_collapse_alert_fires_on_collapse_only(
    service: BackgroundService, engine: ReweightEngine
) -> None:
    q, metric, threshold = _rule()
    collapsed = _window(service, engine, metric, ["7"] * 8)
    assert _quantile(q, collapsed) <= threshold  # fires
    diverse = _window(service, engine, metric, ["1", "2", "3", "4", "5", "6", "7", "7"])
    assert _quantile(q, diverse) > threshold  # quiet


def test_the_other_collapse_figures_are_on_metrics(
    service: BackgroundService, engine: ReweightEngine
) -> None:
    engine.reweight(
        ReweightRequest(
            groups=[
                Group(rewards=[1.0, 1.0], embeddings=[[1.0, 0.0], [1.0, 0.0]], answers=["a", "a"])
            ],
            method="darling",
            advantages="grpo",
        )
    )
    text = httpx.get(f"{service.http_url}/metrics", timeout=10).text
    for name in (
        "reweighter_group_classes_bucket",
        "reweighter_group_effective_size_bucket",
        "reweighter_zero_advantage_share_bucket",
        "reweighter_memory_prompt_keys",
        "reweighter_memory_errors_total",
    ):
        assert name in text, name
