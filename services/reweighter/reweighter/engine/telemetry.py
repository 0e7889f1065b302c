"""Collapse telemetry: per-group diversity figures the engine keeps for the metrics to drain.

Every reweighted group adds its `stats.effective_size`, its `mean_similarity`, its `lambda`
(MMR), and `distinct_answers` / `classes` when
it has them; every request with advantages adds the share of its groups whose advantages are
all zero (no learning signal: all-equal rewards, or a saturated pass@k). The metrics layer
(api/metrics.py) turns them into Prometheus histograms at scrape time, as it does the encoder's
batch sizes, so the engine never depends on Prometheus. Bounded: unscraped figures beyond
`MAX_HELD` are dropped oldest first.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from ..tenancy import DEFAULT_TENANT, current_tenant
from ..types import ReweightResult

MAX_HELD = 65536


def _held() -> deque[float]:
    return deque(maxlen=MAX_HELD)


@dataclass
class GroupTelemetry:
    distinct_answers: deque[float] = field(default_factory=_held)
    classes: deque[float] = field(default_factory=_held)
    effective_size: deque[float] = field(default_factory=_held)
    zero_advantage_share: deque[float] = field(default_factory=_held)
    by_tenant: deque[tuple[str, str, float]] = field(default_factory=lambda: deque(maxlen=MAX_HELD))
    """(tenant, figure, value) of tenants other than "default": the per-tenant histograms."""
    mean_similarity: deque[float] = field(default_factory=_held)
    lambda_: deque[float] = field(default_factory=_held)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, result: ReweightResult) -> None:
        tenant = current_tenant()
        mine = None if tenant == DEFAULT_TENANT else self.by_tenant
        with self._lock:
            zero = 0
            with_adv = 0
            for g in result.groups:
                s = g.stats
                for name in (
                    "mean_similarity", "lambda_", "effective_size", "distinct_answers", "classes"
                ):
                    value = getattr(s, name)
                    if value is not None:
                        getattr(self, name).append(value)
                        if mine is not None:
                            mine.append((tenant, name, value))
                if g.advantages is not None:
                    with_adv += 1
                    zero += all(abs(a) < 1e-12 for a in g.advantages)
            if with_adv:
                self.zero_advantage_share.append(zero / with_adv)
                if mine is not None:
                    mine.append((tenant, "zero_advantage_share", zero / with_adv))

    def drain_tenants(self) -> list[tuple[str, str, float]]:
        """The per-tenant figures since the last call; empties their buffer."""
        with self._lock:
            out = list(self.by_tenant)
            self.by_tenant.clear()
            return out

    def drain(self) -> dict[str, list[float]]:
        """Everything recorded since the last drain, by figure name; empties the buffers."""
        with self._lock:
            out = {}
            names = ("distinct_answers", "classes", "effective_size", "zero_advantage_share")
            for name in (*names, "mean_similarity", "lambda_"):
                buf: deque[float] = getattr(self, name)
                out[name] = list(buf)
                buf.clear()
            return out
