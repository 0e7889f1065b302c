"""The diversity board: per training job, per step, the collapse figures the engine computes.

Prometheus histograms (engine/telemetry.py) say how diverse groups are across the whole service;
they cannot say "job A's step 40 had one distinct answer per group". The board keeps, for each
job (the caller's tenant name; "default" without tenants), a bounded ring of per-step
aggregates of every reweighted group: distinct answers, effective size, mean similarity, lambda,
the share of zero-spread groups and the reweighting latency. The dashboard (`GET /dashboard`,
data at `GET /v1/dashboard`) plots them live.

Bounded: `max_steps` steps per job (oldest dropped first) and `max_jobs` jobs (the least
recently updated dropped first). A request without a `step` counts towards the job's latest
step (step 0 before any). Recording is a few additions per group under a lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..types import ReweightResult

try:  # issue 38's tenants: the caller's tenant name, set by the transports before any route
    from ..tenancy import current_tenant as _current_tenant
except ImportError:  # pragma: no cover - before tenants exist every caller is one job

    def _current_tenant() -> str:
        return "default"


def current_job() -> str:
    """The job a request belongs to: its tenant's name ("default" without tenants)."""
    return str(_current_tenant())


COLLAPSE_STEPS = 3
"""The collapse alert fires when the median distinct answers per group is <= 1 on each of the
job's last COLLAPSE_STEPS steps that carried answers (docs/operations.md's Prometheus rule,
`histogram_quantile(0.5, ...) <= 1`, per job and counted in steps instead of minutes)."""


class _Mean:
    __slots__ = ("n", "total")

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value

    def value(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass
class _Step:
    requests: int = 0
    groups: int = 0
    zero_spread: int = 0
    distinct: _Mean = field(default_factory=_Mean)
    distinct_counts: dict[int, int] = field(default_factory=dict)
    effective_size: _Mean = field(default_factory=_Mean)
    mean_similarity: _Mean = field(default_factory=_Mean)
    lambda_: _Mean = field(default_factory=_Mean)
    latency: _Mean = field(default_factory=_Mean)
    latency_max: float = 0.0

    def median_distinct(self) -> float | None:
        """The median of the step's per-group distinct answers (the mean of the two middle
        values for an even count, as a quantile of the counts)."""
        n = sum(self.distinct_counts.values())
        if not n:
            return None
        ordered = sorted(self.distinct_counts.items())

        def nth(k: int) -> int:
            seen = 0
            for value, count in ordered:
                seen += count
                if seen > k:
                    return value
            return ordered[-1][0]

        return (nth((n - 1) // 2) + nth(n // 2)) / 2

    def as_dict(self, step: int) -> dict[str, Any]:
        def r(x: float | None, nd: int = 4) -> float | None:
            return None if x is None else round(x, nd)

        latency = self.latency.value()
        return {
            "step": step,
            "requests": self.requests,
            "groups": self.groups,
            "distinct_answers": r(self.distinct.value()),
            "distinct_answers_median": self.median_distinct(),
            "effective_size": r(self.effective_size.value()),
            "mean_similarity": r(self.mean_similarity.value()),
            "lambda": r(self.lambda_.value()),
            "zero_spread_share": r(self.zero_spread / self.groups if self.groups else None),
            "latency_ms": r(None if latency is None else latency * 1000, 2),
            "latency_ms_max": round(self.latency_max * 1000, 2),
        }


class DiversityBoard:
    """Per job, a ring of per-step aggregates; `snapshot(job)` is what the dashboard reads."""

    def __init__(
        self, max_steps: int = 500, max_jobs: int = 64, job: Callable[[], str] = current_job
    ) -> None:
        self.max_steps, self.max_jobs, self._job = max_steps, max_jobs, job
        self._jobs: OrderedDict[str, OrderedDict[int, _Step]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, step: int | None, result: ReweightResult, seconds: float) -> None:
        """One answered reweight request: its groups' figures under (the caller's job, step)."""
        job = self._job()
        with self._lock:
            steps = self._jobs.get(job)
            if steps is None:
                steps = self._jobs[job] = OrderedDict()
                while len(self._jobs) > self.max_jobs:
                    self._jobs.popitem(last=False)
            self._jobs.move_to_end(job)
            if step is None:
                step = next(reversed(steps)) if steps else 0
            agg = steps.get(step)
            if agg is None:
                agg = steps[step] = _Step()
                if len(steps) > 1 and step < next(reversed(steps)):
                    # a late step (retries, several workers): keep the ring in step order
                    ordered = sorted(steps.items())
                    steps.clear()
                    steps.update(ordered)
                while len(steps) > self.max_steps:
                    steps.popitem(last=False)
            agg.requests += 1
            agg.latency.add(seconds)
            agg.latency_max = max(agg.latency_max, seconds)
            for g in result.groups:
                s = g.stats
                agg.groups += 1
                spread = g.advantages if g.advantages is not None else g.rewards
                if spread and max(spread) - min(spread) < 1e-12:
                    agg.zero_spread += 1
                agg.mean_similarity.add(s.mean_similarity)
                if s.effective_size is not None:
                    agg.effective_size.add(s.effective_size)
                if s.lambda_ is not None:
                    agg.lambda_.add(s.lambda_)
                if s.distinct_answers is not None:
                    agg.distinct.add(s.distinct_answers)
                    d = int(s.distinct_answers)
                    agg.distinct_counts[d] = agg.distinct_counts.get(d, 0) + 1

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def snapshot(self, job: str) -> dict[str, Any]:
        """The job's steps, oldest first, and the collapse alert's state."""
        with self._lock:
            steps = [agg.as_dict(step) for step, agg in self._jobs.get(job, {}).items()]
        medians = [(s["step"], s["distinct_answers_median"]) for s in steps]
        answered = [(st, m) for st, m in medians if m is not None]
        run = []  # the trailing run of collapsed steps
        for st, m in reversed(answered):
            if m > 1:
                break
            run.append(st)
        firing = len(run) >= COLLAPSE_STEPS
        return {
            "job": job,
            "max_steps": self.max_steps,
            "steps": steps,
            "collapse": {
                "firing": firing,
                "since_step": run[-1] if firing else None,
                "rule": f"median distinct answers per group <= 1 on the last {COLLAPSE_STEPS} "
                "steps with answers",
            },
        }
