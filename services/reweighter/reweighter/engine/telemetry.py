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
    mean_similarity: deque[float] = field(default_factory=_held)
    lambda_: deque[float] = field(default_factory=_held)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, result: ReweightResult) -> None:
        with self._lock:
            zero = 0
            with_adv = 0
            for g in result.groups:
                s = g.stats
                self.mean_similarity.append(s.mean_similarity)
                if s.lambda_ is not None:
                    self.lambda_.append(s.lambda_)
                if s.effective_size is not None:
                    self.effective_size.append(s.effective_size)
                if s.distinct_answers is not None:
                    self.distinct_answers.append(s.distinct_answers)
                if s.classes is not None:
                    self.classes.append(s.classes)
                if g.advantages is not None:
                    with_adv += 1
                    zero += all(abs(a) < 1e-12 for a in g.advantages)
            if with_adv:
                self.zero_advantage_share.append(zero / with_adv)

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
