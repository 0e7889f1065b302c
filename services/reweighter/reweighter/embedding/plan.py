"""The batcher's policy: which pieces the next round computes, as one pure function.

`plan(pending, budget)` reads the pending requests (their texts' pieces and how far each text
has been scheduled) and returns the round as typed ranges; it changes nothing. The batcher's
worker applies the round (advances the cursors, marks who was served) and runs it. Why apart:
the rule is the product's fairness promise (no client can starve another), so it is tested
here without threads, models or clocks (tests/unit/test_plan.py), as infinity keeps its
`pop_optimal_batches` apart from its worker.

The rule. A round is bounded by `budget.batch` (rows x longest piece, as a forward pass is).
The least recently served request anchors it: whole, when at most `budget.slice_tokens` of it
is left, else its longest next piece. The rest of the round is filled, one piece at a time,
with whichever pending piece pads least against it (older requests first among equals); when
everything pending then fits within `Budget.fits_with_tail`, the round takes it all. With one
tenant the fill reads each request's `LengthIndex` (kept by the worker) by bisection instead of
scanning every queued text: the same rounds, at a cost per round of what the round takes.

Tenants (reweighter.tenancy; no job can starve another): with requests of several tenants
pending, the tenants share the encoder by weight first, then a tenant's requests share its part
as above.
The worker keeps each active tenant's virtual time (tokens it was served / its weight, a
tenant that becomes active starting at the least of the others', as in start-time fair
queueing) and passes it in as `shares`. The tenant with the least virtual time anchors the
round (its least recently served request, as above), and the fill first takes from each tenant
at most its weighted part of the round's tokens; only then, work-conserving, whatever pads
least from anyone. When the anchor's tenant is served whole by the round (a light job's small
request), the others add only their weighted part relative to what it takes and the round
ends: short, so the light job waits for the round in progress and one short round, however
many requests another tenant floods in. Two backlogged tenants' tokens split by weight. With
one tenant (every single-key or open service) the rule is exactly the one above.

The round in progress. A request that arrives waits for the round being computed (a round is
one forward pass on CPU: it cannot be cut), so while several tenants are around a round is one
slice (`round_budget`: `slice_tokens`, the size in which a small request is served whole), and
a light job's request waits for one slice of another job's work, not four. "Around" is
`tenants_around`: a tenant with work now, or with work in the last `LINGER_ROUNDS` rounds,
since a job's next request comes a moment after its last answer, while the round planned at
that answer is already running. The cost is the flood's: more, smaller passes, paid only while
another tenant is around (measured within the noise on CPU, BENCHMARKS.md); a service with one
tenant never pays it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from reweighter.embedding.base import Budget, Piece


class PendingJob(Protocol):
    """One distinct text in flight, as the policy sees it."""

    @property
    def pieces(self) -> Sequence[Piece] | None:
        """Its pieces; None while it is still being split (not schedulable yet)."""

    @property
    def scheduled(self) -> int:
        """How many of its pieces earlier rounds took."""

    @property
    def finished(self) -> bool:
        """Computed or failed: nothing left to schedule."""


J = TypeVar("J", bound=PendingJob)


class PendingRequest(Protocol[J]):
    """One caller's request: its distinct texts and its place in the rotation."""

    @property
    def jobs(self) -> Sequence[J]: ...

    @property
    def turn(self) -> int:
        """The last round that served it (-1: never)."""

    @property
    def seq(self) -> int:
        """Arrival order."""

    # Optional (read with getattr; absent: one tenant, "default", weight 1):
    # tenant: str -- whose request it is; weight: float -- that tenant's weight.


DEFAULT_TENANT = "default"


def tenant_of(req: object) -> str:
    return getattr(req, "tenant", DEFAULT_TENANT)


def weight_of(req: object) -> float:
    return getattr(req, "weight", 1.0)


R = TypeVar("R", bound=PendingRequest)


@dataclass(frozen=True)
class RoundBudget:
    """What bounds one round: the padded batch, and the fair slice of one request."""

    batch: Budget
    slice_tokens: int


@dataclass(frozen=True)
class Range(Generic[J]):
    """Pieces `start:end` of `job`."""

    job: J
    start: int
    end: int


@dataclass(frozen=True)
class Slice(Generic[R, J]):
    """What one request contributes to a round (the request each text was taken for)."""

    request: R
    ranges: tuple[Range[J], ...]


LINGER_ROUNDS = 16
"""Rounds a tenant still counts as around after its last request was live (see the module).
Why 16: a job sends its next request a client round trip after its last answer; with 2, a
light job measured under a flood dropped out of "around" in between, met a full round on its
return and its p95 stayed at 1.0-1.7 s; with 16 it was 0.46-0.69 s, the flood's throughput
unchanged (CPU, load 2.5; BENCHMARKS.md, Tenants). One-slice rounds are ~0.1 s on 2 CPU cores
and tens of ms on a GPU, so 16 of them are well above any round trip on loopback or a LAN."""


def tenants_around(last_live: Mapping[str, int], round_: int, linger: int = LINGER_ROUNDS) -> int:
    """How many tenants are around for round `round_` (rounds are numbered by the worker):
    those whose requests were live at most `linger` rounds before it. `last_live`: tenant ->
    the last round it had a live request in (`round_` itself when it has one now)."""
    return sum(1 for last in last_live.values() if round_ - last <= linger)


def round_budget(budget: RoundBudget, tenants: int) -> RoundBudget:
    """The bound of the next round with `tenants` tenants around: `budget` itself for one (or
    none); for two or more, one slice of padded tokens (never above the budget), whatever
    their number. Why: a request waits for the round in progress, which nothing can cut
    short; one-slice rounds while several jobs share the encoder bound that wait by one slice
    of work (a small request still fits whole in the round it anchors), and a job alone keeps
    its full rounds. Measured on CPU (2 cores shared, load 4-6; BENCHMARKS.md, "Tenants:
    the round in progress"): between the machine's load bursts a light job's request under a
    flood took 0.13-0.22 s with one-slice rounds, 0.25-0.29 s with half rounds, mostly
    0.7-1.7 s with full ones, the flood's throughput within the noise."""
    if tenants < 2:
        return budget
    tokens = min(budget.batch.tokens, budget.slice_tokens)
    return RoundBudget(Budget(tokens, budget.batch.rows), budget.slice_tokens)


def schedulable(job: PendingJob, at: int | None = None) -> bool:
    """Whether `job` has a piece at `at` (default: its first unscheduled one) to hand out."""
    if job.pieces is None or job.finished:
        return False
    return (job.scheduled if at is None else at) < len(job.pieces)


def plan(
    pending: Sequence[R], budget: RoundBudget, shares: Mapping[str, float] | None = None
) -> list[Slice[R, PendingJob]]:
    """The next round over the live `pending` requests, per request in rotation order; empty when
    nothing is schedulable. Pure: reads `pending` (and `shares`: each tenant's virtual time,
    absent = 0), returns ranges.

    Why not a slice from every request in turn: each request hands over its own longest texts,
    and eight requests' longest texts differ, so every round padded to the longest of a mixed
    set (padding efficiency 0.93 against 0.99 for one global sort); and a request alone got
    only its slice per round, a quarter of a pass (128 texts in one request ran in 57 passes
    where a global sort needs 13). Fairness stays with the anchor: a request not served in a
    round moves ahead of every request that was, so it anchors a round within as many rounds
    as there are active requests (in practice the next one or two: the fill serves most
    requests every round), and a newcomer anchors the very next round.
    """
    # Least recently served first (never served: first), then arrival order.
    order = sorted(pending, key=lambda r: (r.turn, r.seq))
    caps = _tenant_caps(order, budget, shares or {})
    if caps is None:  # one tenant (every single-key or open service): the same rule, indexed
        return _plan_indexed(order, budget)
    # the tenant with the least virtual time first (its own requests in rotation order)
    first = min(caps, key=lambda t: ((shares or {}).get(t, 0.0), caps[t][1]))
    order = [r for r in order if tenant_of(r) == first] + [
        r for r in order if tenant_of(r) != first
    ]
    return _plan_scan(order, budget, caps, first)


def _plan_scan(
    order: Sequence[R],
    budget: RoundBudget,
    caps: dict[str, tuple[float, int, float]] | None,
    first: str | None,
) -> list[Slice[R, PendingJob]]:
    """The rule over requests in rotation `order`, scanning every queued text: with several
    tenants (`caps`, `first`: the anchoring tenant); with `caps` None, the one-tenant rule that
    `_plan_indexed` computes from the indices (the tests' oracle for it)."""
    rnd = _Round(budget.batch)
    for rank, req in enumerate(order):
        if rnd.count:
            break
        # A request with at most a slice left is served whole in the round it anchors (a small
        # request is answered after one round); otherwise its longest piece anchors the round
        # and the fill adds what pads least (whole requests of mixed lengths as anchors padded
        # every round to their longest: 0.956 against 0.973).
        whole = _left_at_most(req.jobs, budget.slice_tokens)
        rnd.anchor(req, rank, _longest_first(req.jobs), budget.slice_tokens if whole else 1)
    if rnd.count and not rnd.full:
        candidates, complete = _candidates(order, budget.batch.rows, rnd.at)
        if caps is not None and first is not None and not _left(order, first, rnd.at):
            # The anchor's tenant is served whole by this round (a light job's request): the
            # others add their weighted part relative to what it takes, and the round ends
            # there, short, so the light job is answered after a short round, not a full one.
            used, w = rnd.used.get(first, 0), caps[first][2]
            rnd.fill(candidates, {t: used * wt / w for t, (_, _, wt) in caps.items()}, pad=False)
            return rnd.slices()
        if caps is not None:  # each tenant's weighted part first, then work-conserving
            rnd.fill(candidates, {t: cap for t, (cap, _, _) in caps.items()})
            if not rnd.full:
                candidates, complete = _candidates(order, budget.batch.rows, rnd.at)
        rnd.fill(candidates)
        if complete:
            rnd.take_tail(candidates)
    return rnd.slices()


def _left(order: Sequence[PendingRequest], tenant: str, at: Callable[[PendingJob], int]) -> bool:
    """Whether `tenant` has work the round (cursor `at`) did not take."""
    return any(
        schedulable(j, at(j)) for r in order if tenant_of(r) == tenant for j in r.jobs
    )


def _tenant_caps(
    order: Sequence[PendingRequest], budget: RoundBudget, shares: Mapping[str, float]
) -> dict[str, tuple[float, int, float]] | None:
    """Per tenant with schedulable work: (its weighted part of a round's tokens, its first
    request's rank, its weight); None when one tenant (or none) has work: the single-tenant
    rule."""
    weights: dict[str, float] = {}
    first: dict[str, int] = {}
    for rank, req in enumerate(order):
        t = tenant_of(req)
        if t in weights:
            continue
        if _has_work(req):
            weights[t] = max(weight_of(req), 1e-9)
            first[t] = rank
    if len(weights) < 2:
        return None
    total = sum(weights.values())
    return {t: (budget.batch.tokens * w / total, first[t], w) for t, w in weights.items()}


class LengthIndex:
    """One request's schedulable texts by the length of their next piece: (tokens, position in
    the request's `jobs`), ascending. Kept by the batcher's worker (`add` when a text's pieces
    arrive, `moved` when a round takes some of them), read by `plan`.

    Why: with one tenant the fill wants, each round, the pending pieces nearest the round's
    longest in length; found by scanning every queued text, a round cost O(texts queued) while
    it takes ~10-16 of them on a CPU: 1.64 ms a completion with a step of 4,096 queued
    (BENCHMARKS Y). Bisection from the round's longest reads only what the round takes. A
    request without one (tests' fakes) gets a fresh index each plan: the same rounds.

    Exact by construction: one entry per schedulable text, for its next piece. An entry that no
    longer matches its text (failed, abandoned meanwhile) is skipped where it is read."""

    __slots__ = ("jobs", "entries", "pos", "shared")

    def __init__(self, jobs: Sequence[PendingJob]) -> None:
        self.jobs = jobs
        self.pos = {id(j): k for k, j in enumerate(jobs)}
        # ids of its texts another request holds too (the worker marks them as requests
        # arrive; it may keep one marked after the other request left); None: not known
        self.shared: set[int] | None = None
        self.entries: list[tuple[int, int]] = sorted(
            (j.pieces[j.scheduled].tokens, k)  # type: ignore[index]
            for k, j in enumerate(jobs)
            if schedulable(j)
        )

    def add(self, job: PendingJob) -> None:
        """`job` (of this request) is schedulable now, or again at a new piece: index it."""
        k = self.pos.get(id(job))
        if k is not None and schedulable(job):
            bisect.insort(self.entries, (job.pieces[job.scheduled].tokens, k))  # type: ignore[index]

    def moved(self, job: PendingJob, was: int) -> None:
        """A round took `job`'s pieces from `was` on: its entry moves to its new next piece."""
        k = self.pos.get(id(job))
        if k is None or job.pieces is None:
            return
        if was < len(job.pieces):
            entry = (job.pieces[was].tokens, k)
            i = bisect.bisect_left(self.entries, entry)
            if i < len(self.entries) and self.entries[i] == entry:
                del self.entries[i]
        self.add(job)

    def job(self, entry: tuple[int, int]) -> PendingJob | None:
        """The entry's text, if it still stands for that text's next piece."""
        job = self.jobs[entry[1]]
        if not schedulable(job) or job.pieces[job.scheduled].tokens != entry[0]:  # type: ignore[index]
            return None
        return job


def _index(req: PendingRequest) -> LengthIndex:
    got = getattr(req, "length_index", None)
    return got if got is not None else LengthIndex(req.jobs)


def _has_work(req: PendingRequest) -> bool:
    """Whether `req` has a piece to hand out (a text split and not all scheduled)."""
    ix = getattr(req, "length_index", None)
    if ix is None:
        return any(schedulable(j) for j in req.jobs)
    return next(_indexed_jobs(ix), None) is not None


def _plan_indexed(order: Sequence[R], budget: RoundBudget) -> list[Slice[R, PendingJob]]:
    """`plan` with one tenant, reading each request's LengthIndex: the anchor as in `plan`, the
    fill by bisection from the round's longest, the tail from the same indices. The same
    rounds as the scan (tests/unit/test_plan.py holds the two together on random workloads),
    except that the fill may take from every queued text, not only the first few thousand."""
    ixs = [_index(r) for r in order]
    rnd = _Round(budget.batch)
    for rank, req in enumerate(order):
        if rnd.count:
            break
        whole = _left_at_most(_indexed_jobs(ixs[rank]), budget.slice_tokens)
        limit = budget.slice_tokens if whole else 1
        rnd.anchor(req, rank, _longest_first_indexed(ixs[rank]), limit)
    if rnd.count and not rnd.full:
        views = _Views(order, ixs, rnd)
        rnd.fill_indexed(views)
        rnd.take_tail_indexed(views)
    return rnd.slices()


def _longest_first_indexed(ix: LengthIndex) -> Iterator[PendingJob]:
    """`_longest_first` from the index: longest next piece first, equal lengths in the
    request's order; lazily (the anchor reads only what it takes)."""
    entries, end = ix.entries, len(ix.entries)
    while end > 0:
        tokens = entries[end - 1][0]
        start = bisect.bisect_left(entries, (tokens, -1), 0, end)
        for e in entries[start:end]:
            job = ix.job(e)
            if job is not None:
                yield job
        end = start


def _indexed_jobs(ix: LengthIndex) -> Iterator[PendingJob]:
    """The texts `ix` stands for now, in index order (stale entries skipped)."""
    return (job for e in ix.entries if (job := ix.job(e)) is not None)


class _Views:
    """The fill's candidates, read from the indices: per request, the entries nearest a length,
    skipping texts the round already touched and texts an earlier request also holds (a shared
    text is a candidate of the first request in rotation that has it, as in `_candidates`)."""

    def __init__(self, order: Sequence[PendingRequest], ixs: list[LengthIndex], rnd: _Round):
        self.order, self.ixs, self.rnd = order, ixs, rnd
        self._first: dict[int, int] = {}
        if all(ix.shared is not None for ix in ixs):
            self._shared: list[set[int]] = [ix.shared for ix in ixs]  # type: ignore[misc]
        else:  # not kept (the tests' fakes): texts in two or more of these requests
            seen: set[int] = set()
            twice: set[int] = set()
            for ix in ixs:
                twice.update(seen.intersection(ix.pos))
                seen.update(ix.pos)
            self._shared = [twice] * len(ixs)

    def usable(self, rank: int, e: tuple[int, int]) -> PendingJob | None:
        job = self.ixs[rank].job(e)
        if job is None or id(job) in self.rnd._open:
            return None
        if rank and id(job) in self._shared[rank] and self._first_holder(id(job)) != rank:
            return None
        return job

    def _first_holder(self, key: int) -> int:
        """The first request in rotation whose index holds the text `key`."""
        got = self._first.get(key)
        if got is None:
            got = self._first[key] = next(r for r, ix in enumerate(self.ixs) if key in ix.pos)
        return got

    def below(self, rank: int, limit: int, start: int | None = None) -> tuple[int, int] | None:
        """(entry index, tokens) of request `rank`'s longest usable entry of at most `limit`
        tokens (from `start` down), or None."""
        entries = self.ixs[rank].entries
        i = bisect.bisect_right(entries, (limit, 1 << 62)) if start is None else start + 1
        for j in range(i - 1, -1, -1):
            if self.usable(rank, entries[j]) is not None:
                return j, entries[j][0]
        return None

    def above(self, rank: int, limit: int, start: int | None = None) -> tuple[int, int] | None:
        """Request `rank`'s shortest usable entry over `limit` tokens (from `start` up)."""
        entries = self.ixs[rank].entries
        i = bisect.bisect_right(entries, (limit, 1 << 62)) if start is None else start
        for j in range(i, len(entries)):
            if self.usable(rank, entries[j]) is not None:
                return j, entries[j][0]
        return None


@dataclass
class _Open:
    """A range being built: the request it was taken for, that request's rank, the job."""

    request: PendingRequest
    rank: int
    job: PendingJob
    start: int
    end: int


_Candidate = tuple[int, PendingRequest, PendingJob]  # (rank, request, job)


class _Round:
    """The pieces of one round within its padded budget, with cursors of its own: what it takes
    is recorded here, never written into the jobs."""

    def __init__(self, batch: Budget) -> None:
        self.batch = batch
        self.count = self.longest = 0
        self.full = False
        self._open: dict[int, _Open] = {}  # id(job) -> its range in this round
        self.used: dict[str, int] = {}  # tenant -> tokens of its pieces in this round

    def at(self, job: PendingJob) -> int:
        """The job's next piece, counting what this round already took."""
        taken = self._open.get(id(job))
        return job.scheduled if taken is None else taken.end

    def _room(self, cost: int) -> bool:
        if not self.count:
            return True  # a round takes at least one piece, whatever its size
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
        """The fair part: up to `limit` tokens of whole pieces of `req`, longest texts first."""
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
        """Work-conserving: add, one at a time, the pending piece that wastes least padding.

        A piece no longer than the round's longest wastes (longest - its length); a longer one
        pads every piece already in by the difference. Among equal waste, the older request.
        `caps` (tenant -> tokens): a tenant's pieces are taken only while its pieces in the
        round stay within its cap (the tenants' weighted parts; the caller fills again without).
        `pad=False`: only pieces no longer than the round's longest (the round's padded length,
        hence its time, stays what the anchor made it).
        """

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
        # each (cost, rank, i) is distinct): with thousands of texts queued an insort per text
        # moved the list a few thousand times a round.
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

    def fill_indexed(self, views: _Views) -> None:
        """`fill` (one tenant, pad=True) over the indices: the same choice each step (least
        waste; among equals the older request, then as `fill` orders its candidates), reading
        per request only the entries next to the round's longest. Texts the round touched come
        back through `offer` as in `fill`.

        Per request a head below (its best entry at most the round's longest) and a head above
        (its shortest entry over it), in two heaps; a request's heads are recomputed when it is
        picked from or when the round's longest passes its head above (only then can entries
        change sides). Superseded heads stay in the heaps, marked by a version, and are
        skipped."""
        order, ixs = views.order, views.ixs
        below: list[tuple[int, int, int]] = []  # touched texts' next pieces: (cost, -rank, pos)
        above: list[tuple[int, int, int]] = []  # (cost, rank, pos)
        jobs: dict[tuple[int, int], tuple[PendingRequest, PendingJob]] = {}

        def offer(rank: int, req: PendingRequest, job: PendingJob) -> None:
            assert job.pieces is not None
            k = self.at(job)
            if k >= len(job.pieces):
                return
            pos = ixs[rank].pos[id(job)]
            jobs[rank, pos] = (req, job)
            cost = job.pieces[k].tokens
            if cost <= self.longest:
                bisect.insort(below, (cost, -rank, pos))
            else:
                heapq.heappush(above, (cost, rank, pos))

        for o in list(self._open.values()):  # the anchor's texts with pieces left
            offer(o.rank, o.request, o.job)
        n = len(order)
        bver, aver = [0] * n, [0] * n
        head_below: list[tuple[int, int, int, int, int]] = []  # (-cost, rank, -pos, at, ver)
        head_above: list[tuple[int, int, int, int, int]] = []  # (cost, rank, pos, at, ver)
        cap: int | None = None  # once the fill gave up on longer pieces, those stay dropped
        lazy_above = True

        def limit() -> int:
            return self.longest if cap is None else min(self.longest, cap)

        def push_below(rank: int, start: int | None = None) -> None:
            bver[rank] += 1
            got = views.below(rank, limit(), start)
            if got is not None:
                at, cost = got
                entry = (-cost, rank, -ixs[rank].entries[at][1], at, bver[rank])
                heapq.heappush(head_below, entry)

        def push_above(rank: int, start: int | None = None) -> None:
            aver[rank] += 1
            got = views.above(rank, self.longest, start) if lazy_above else None
            if got is not None:
                at, cost = got
                entry = (cost, rank, ixs[rank].entries[at][1], at, aver[rank])
                heapq.heappush(head_above, entry)

        def top(heap: list, ver: list[int]) -> tuple | None:
            while heap and heap[0][4] != ver[heap[0][1]]:
                heapq.heappop(heap)
            return heap[0] if heap else None

        for rank in range(n):
            push_below(rank)
            push_above(rank)
        longest = self.longest
        while not self.full:
            if self.longest != longest:  # the round grew: what it passed is below now
                longest = self.longest
                while above and above[0][0] <= longest:
                    cost, rank, pos = heapq.heappop(above)
                    bisect.insort(below, (cost, -rank, pos))
                while (h := top(head_above, aver)) is not None and h[0] <= longest:
                    push_below(h[1])
                    push_above(h[1])
            # the best below: max (cost, -rank, pos) of the touched ones and the heads
            best_b = below[-1] if below else None
            hb = top(head_below, bver)
            if hb is not None:
                cand = (-hb[0], -hb[1], -hb[2])
                if best_b is None or cand > best_b:
                    best_b = cand
            best_a = above[0] if above else None
            ha = top(head_above, aver)
            if ha is not None and (best_a is None or ha[:3] < best_a):
                best_a = ha[:3]
            waste_below = self.longest - best_b[0] if best_b is not None else None
            waste_above = self.count * (best_a[0] - self.longest) if best_a is not None else None
            if waste_below is None and waste_above is None:
                return
            use_below = waste_above is None or (
                waste_below is not None and waste_below <= waste_above
            )
            cost = best_b[0] if use_below else best_a[0]  # type: ignore[index]
            if not self._room(cost):
                if use_below or not (below or hb is not None):
                    self.full = True
                    return
                above.clear()  # nothing longer fits any more; shorter pieces still might
                lazy_above = False
                aver = [v + 1 for v in aver]  # every head above dropped
                cap = self.longest if cap is None else cap
                continue
            if use_below:
                assert best_b is not None
                rank, pos = -best_b[1], best_b[2]
                if below and below[-1] == best_b:
                    below.pop()
                    req, job = jobs[rank, pos]
                else:
                    assert hb is not None
                    req, job = order[rank], ixs[rank].jobs[pos]
                    push_below(rank, hb[3] - 1)
            else:
                assert best_a is not None
                rank, pos = best_a[1], best_a[2]
                if above and above[0] == best_a:
                    heapq.heappop(above)
                    req, job = jobs[rank, pos]
                else:
                    assert ha is not None
                    req, job = order[rank], ixs[rank].jobs[pos]
                    push_above(rank, ha[3] + 1)
            self._add(req, rank, job)
            offer(rank, req, job)  # the same text's next window, if it has one

    def take_tail_indexed(self, views: _Views) -> None:
        """`take_tail` over everything pending (the indices and the texts the round touched):
        take it all if the round then stays within `Budget.fits_with_tail`; reads no further
        than a round's worth when it does not."""
        if not self.count:
            return
        rows, longest = self.count, self.longest
        pending = itertools.chain(
            ((o.rank, views.ixs[o.rank].pos[id(o.job)], o.request, o.job)
             for o in list(self._open.values())),  # the round's texts with pieces left
            ((rank, e[1], views.order[rank], job) for rank, ix in enumerate(views.ixs)
             for e in ix.entries if (job := views.usable(rank, e)) is not None),
        )  # fmt: skip
        left: list[tuple[int, int, PendingRequest, PendingJob]] = []
        for item in pending:  # stops as soon as it cannot fit: a huge queue costs a round's worth
            left.append(item)
            job = item[3]
            assert job.pieces is not None
            for k in range(self.at(job), len(job.pieces)):
                rows += 1
                longest = max(longest, job.pieces[k].tokens)
                if not self.batch.fits_with_tail(rows, longest):
                    return
        left.sort(key=lambda t: (t[0], t[1]))
        for rank, _, req, job in left:
            assert job.pieces is not None
            while self.at(job) < len(job.pieces):
                self._add(req, rank, job)

    def take_tail(self, candidates: list[_Candidate]) -> None:
        """`candidates` is all pending work: take what is left if the round then stays within
        `Budget.fits_with_tail` (measured: a pass of 1-3 left-over pieces took 42-97 ms against
        330-420 ms for a full one on 2 cores)."""
        if not self.count:
            return
        rows, longest = self.count, self.longest
        for _, _, job in candidates:  # stops as soon as it cannot fit: a huge text costs O(1)
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
        """Per request (the one each job was taken for), its job ranges, in rank order."""
        grouped: dict[int, tuple[int, PendingRequest, list[Range]]] = {}
        for o in self._open.values():
            grouped.setdefault(id(o.request), (o.rank, o.request, []))[2].append(
                Range(o.job, o.start, o.end)
            )
        ordered = sorted(grouped.values(), key=lambda g: g[0])
        return [Slice(req, tuple(ranges)) for _, req, ranges in ordered]


def _longest_first(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    """A request's schedulable texts, longest next piece first: the order an anchor hands them
    over in. Why: a round is padded to its longest piece; taken in text order, short and long
    completions mixed and about a third of each batch was padding (measured)."""
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
    order: list[R], max_rows: int, at: Callable[[PendingJob], int]
) -> tuple[list[_Candidate], bool]:
    """(rank, request, job) of jobs with pieces left after the anchor (`at`: the round's
    cursor), oldest requests first, bounded: a round never needs more than a few times the
    pieces it can hold; and whether that is all."""
    out: list[_Candidate] = []
    seen: set[int] = set()
    cap = max(256, 4 * min(max_rows, 1024))
    for rank, req in enumerate(order):
        # schedulable(job, at(job)), inlined: this runs for every queued text every round
        for job in req.jobs:
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
    """Whether the schedulable `jobs` have at most `tokens` left to schedule (reads no further
    than that)."""
    left = 0
    for job in jobs:
        if schedulable(job):
            assert job.pieces is not None
            for k in range(job.scheduled, len(job.pieces)):
                left += job.pieces[k].tokens
                if left > tokens:
                    return False
    return True
