"""The rule of reweighter.embedding.plan, as a scan: the tests' oracle for the planner.

Why it is kept: until 125deb6 the planner had two algorithms for one rule, this scan (every
queued text read each round; it served several tenants) beside the length index (one tenant).
Production now has the index alone, for one tenant and many; this is the scan as it was
(commit 125deb6), so the tests can hold the index to the very rounds the rule gave, on random
workloads of one tenant and several (tests/embedding/test_plan.py). Simple to read and slow by
design: it is never imported by the service.

One difference is known and stays out of the workloads: the scan's fill looks at the first
max(256, 4 x rows) queued texts only (and skips the tail when there were more), the index at
all of them.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from reweighter.embedding.base import Budget
from reweighter.embedding.plan import (
    PendingJob,
    PendingRequest,
    Range,
    RoundBudget,
    Slice,
    schedulable,
    tenant_of,
    weight_of,
)


def plan(
    pending: Sequence[PendingRequest],
    budget: RoundBudget,
    shares: Mapping[str, float] | None = None,
) -> list[Slice]:
    """`reweighter.embedding.plan.plan`, by scanning every queued text."""
    order = sorted(pending, key=lambda r: (r.turn, r.seq))
    caps = _tenant_caps(order, budget, shares or {})
    if caps is None:
        return plan_scan(order, budget, None, None)
    first = min(caps, key=lambda t: ((shares or {}).get(t, 0.0), caps[t][1]))
    order = [r for r in order if tenant_of(r) == first] + [
        r for r in order if tenant_of(r) != first
    ]
    return plan_scan(order, budget, caps, first)


def plan_scan(
    order: Sequence[PendingRequest],
    budget: RoundBudget,
    caps: dict[str, tuple[float, int, float]] | None,
    first: str | None,
) -> list[Slice]:
    """The rule over requests in rotation `order` (`caps`, `first`: the tenants' parts and the
    anchoring tenant; None with one tenant)."""
    rnd = _Round(budget.batch)
    for rank, req in enumerate(order):
        if rnd.count:
            break
        whole = _left_at_most(req.jobs, budget.slice_tokens)
        rnd.anchor(req, rank, _longest_first(req.jobs), budget.slice_tokens if whole else 1)
    if rnd.count and not rnd.full:
        candidates, complete = _candidates(order, budget.batch.rows, rnd.at)
        if caps is not None and first is not None and not _left(order, first, rnd.at):
            used, w = rnd.used.get(first, 0), caps[first][2]
            rnd.fill(candidates, {t: used * wt / w for t, (_, _, wt) in caps.items()}, pad=False)
            return rnd.slices()
        if caps is not None:
            rnd.fill(candidates, {t: cap for t, (cap, _, _) in caps.items()})
            if not rnd.full:
                candidates, complete = _candidates(order, budget.batch.rows, rnd.at)
        rnd.fill(candidates)
        if complete:
            rnd.take_tail(candidates)
    return rnd.slices()


def _left(order: Sequence[PendingRequest], tenant: str, at: Callable[[PendingJob], int]) -> bool:
    return any(schedulable(j, at(j)) for r in order if tenant_of(r) == tenant for j in r.jobs)


def _tenant_caps(
    order: Sequence[PendingRequest], budget: RoundBudget, shares: Mapping[str, float]
) -> dict[str, tuple[float, int, float]] | None:
    weights: dict[str, float] = {}
    first: dict[str, int] = {}
    for rank, req in enumerate(order):
        t = tenant_of(req)
        if t in weights:
            continue
        if any(schedulable(j) for j in req.jobs):
            weights[t] = max(weight_of(req), 1e-9)
            first[t] = rank
    if len(weights) < 2:
        return None
    total = sum(weights.values())
    return {t: (budget.batch.tokens * w / total, first[t], w) for t, w in weights.items()}


@dataclass
class _Open:
    request: PendingRequest
    rank: int
    job: PendingJob
    start: int
    end: int


_Candidate = tuple[int, PendingRequest, PendingJob]  # (rank, request, job)


class _Round:
    def __init__(self, batch: Budget) -> None:
        self.batch = batch
        self.count = self.longest = 0
        self.full = False
        self._open: dict[int, _Open] = {}
        self.used: dict[str, int] = {}

    def at(self, job: PendingJob) -> int:
        taken = self._open.get(id(job))
        return job.scheduled if taken is None else taken.end

    def _room(self, cost: int) -> bool:
        if not self.count:
            return True
        return self.batch.fits(self.count + 1, max(self.longest, cost))

    def _add(self, req: PendingRequest, rank: int, job: PendingJob) -> int:
        assert job.pieces is not None
        taken = self._open.get(id(job))
        if taken is None:
            taken = self._open[id(job)] = _Open(req, rank, job, job.scheduled, job.scheduled)
        cost = job.pieces[taken.end].tokens
        taken.end += 1
        t = tenant_of(req)
        self.used[t] = self.used.get(t, 0) + cost
        self.count += 1
        self.longest = max(self.longest, cost)
        return cost

    def anchor(
        self, req: PendingRequest, rank: int, jobs: Iterable[PendingJob], limit: int
    ) -> None:
        used = 0
        for job in jobs:
            assert job.pieces is not None
            while (k := self.at(job)) < len(job.pieces):
                cost = job.pieces[k].tokens
                if used and used + cost > limit:
                    return
                if not self._room(cost):
                    self.full = True
                    return
                used += self._add(req, rank, job)

    def fill(
        self,
        candidates: list[_Candidate],
        caps: Mapping[str, float] | None = None,
        pad: bool = True,
    ) -> None:
        """Add, one at a time, the candidate piece that wastes least padding (see the rule)."""

        def over(i: int, cost: int) -> bool:
            if caps is None:
                return False
            t = tenant_of(candidates[i][1])
            return self.used.get(t, 0) + cost > caps.get(t, 0)

        below: list[tuple[int, int, int]] = []  # (tokens, -rank, i), ascending: best at the end
        above: list[tuple[int, int, int]] = []  # (tokens, rank, i): best = smallest

        def offer(i: int) -> None:
            rank, _, job = candidates[i]
            assert job.pieces is not None
            k = self.at(job)
            if k >= len(job.pieces):
                return
            cost = job.pieces[k].tokens
            if over(i, cost) or (not pad and cost > self.longest):
                return
            if cost <= self.longest:
                bisect.insort(below, (cost, -rank, i))
            else:
                heapq.heappush(above, (cost, rank, i))

        # The first offers in one pass, sorted once (as offer() one at a time would leave them;
        # each (cost, rank, i) is distinct).
        opened, longest = self._open, self.longest
        for i, (rank, _req, job) in enumerate(candidates):
            taken = opened.get(id(job))
            k = job.scheduled if taken is None else taken.end
            pieces = job.pieces
            assert pieces is not None
            if k >= len(pieces):
                continue
            cost = pieces[k].tokens
            if (caps is not None and over(i, cost)) or (not pad and cost > longest):
                continue
            if cost <= longest:
                below.append((cost, -rank, i))
            else:
                above.append((cost, rank, i))
        below.sort()
        heapq.heapify(above)
        while not self.full:
            while above and above[0][0] <= self.longest:  # the round grew past it
                cost, rank, i = heapq.heappop(above)
                bisect.insort(below, (cost, -rank, i))
            waste_below = self.longest - below[-1][0] if below else None
            waste_above = self.count * (above[0][0] - self.longest) if above else None
            if waste_below is None and waste_above is None:
                return
            use_below = waste_above is None or (
                waste_below is not None and waste_below <= waste_above
            )
            cost = below[-1][0] if use_below else above[0][0]
            if not self._room(cost):
                if use_below or not below:
                    self.full = True
                    return
                above.clear()  # nothing longer fits any more; shorter pieces still might
                continue
            i = below.pop()[2] if use_below else heapq.heappop(above)[2]
            rank, req, job = candidates[i]
            if over(i, cost):
                continue  # its tenant reached its part meanwhile (the next fill may take it)
            self._add(req, rank, job)
            offer(i)  # the same text's next window, if it has one

    def take_tail(self, candidates: list[_Candidate]) -> None:
        if not self.count:
            return
        rows, longest = self.count, self.longest
        for _, _, job in candidates:
            assert job.pieces is not None
            for k in range(self.at(job), len(job.pieces)):
                rows += 1
                longest = max(longest, job.pieces[k].tokens)
                if not self.batch.fits_with_tail(rows, longest):
                    return
        for rank, req, job in candidates:
            assert job.pieces is not None
            while self.at(job) < len(job.pieces):
                self._add(req, rank, job)

    def slices(self) -> list[Slice]:
        grouped: dict[int, tuple[int, PendingRequest, list[Range]]] = {}
        for o in self._open.values():
            grouped.setdefault(id(o.request), (o.rank, o.request, []))[2].append(
                Range(o.job, o.start, o.end)
            )
        ordered = sorted(grouped.values(), key=lambda g: g[0])
        return [Slice(req, tuple(ranges)) for _, req, ranges in ordered]


def _longest_first(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    keyed = [
        (j.pieces[j.scheduled].tokens, j)
        for j in jobs
        if j.pieces is not None and not j.finished and j.scheduled < len(j.pieces)
    ]
    keyed.sort(key=_first, reverse=True)  # stable: equal lengths keep their order
    return [j for _, j in keyed]


def _first(pair: tuple[int, PendingJob]) -> int:
    return pair[0]


def _candidates(
    order: Sequence[PendingRequest], max_rows: int, at: Callable[[PendingJob], int]
) -> tuple[list[_Candidate], bool]:
    out: list[_Candidate] = []
    seen: set[int] = set()
    cap = max(256, 4 * min(max_rows, 1024))
    for rank, req in enumerate(order):
        for job in req.jobs:  # schedulable(job, at(job)), inlined
            pieces = job.pieces
            if pieces is None or job.finished or at(job) >= len(pieces):
                continue
            key = id(job)
            if key not in seen:
                seen.add(key)
                out.append((rank, req, job))
        if len(out) >= cap:
            return out, rank == len(order) - 1
    return out, True


def _left_at_most(jobs: Iterable[PendingJob], tokens: int) -> bool:
    left = 0
    for job in jobs:
        if schedulable(job):
            assert job.pieces is not None
            for k in range(job.scheduled, len(job.pieces)):
                left += job.pieces[k].tokens
                if left > tokens:
                    return False
    return True
