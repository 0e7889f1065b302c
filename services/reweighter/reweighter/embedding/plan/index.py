"""Each request's schedulable texts by the length of their next piece, and the fill's view of
them: how the planner finds the pieces nearest a round's longest without reading every queued
text.

Why: the fill wants, each round, the pending pieces nearest the round's longest in length.
Found by scanning every queued text, a round cost O(texts queued) while it takes ~10-16 of
them on a CPU: 1.64 ms a completion with a step of 4,096 queued (BENCHMARKS Y). Bisection from
the round's longest reads only what the round takes. Every round is planned from these indices,
with one tenant or several (several tenants took a scan until 125deb6, now the tests' oracle:
tests/embedding/plan_oracle.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence

from reweighter.embedding.plan.pending import PendingJob, PendingRequest, schedulable


class LengthIndex:
    """One request's schedulable texts by the length of their next piece: (tokens, position in
    the request's `jobs`), ascending. Kept by the batcher's worker (`add` when a text's pieces
    arrive, `moved` when a round takes some of them), read by `plan`. A request without one
    (tests' fakes) gets a fresh index each plan: the same rounds.

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


def index_of(req: PendingRequest) -> LengthIndex:
    """The request's index: the batcher's, or a fresh one (tests' fakes)."""
    got = getattr(req, "length_index", None)
    return got if got is not None else LengthIndex(req.jobs)


def has_work(req: PendingRequest) -> bool:
    """Whether `req` has a piece to hand out (a text split and not all scheduled)."""
    ix = getattr(req, "length_index", None)
    if ix is None:
        return any(schedulable(j) for j in req.jobs)
    return next(indexed_jobs(ix), None) is not None


def indexed_jobs(ix: LengthIndex) -> Iterator[PendingJob]:
    """The texts `ix` stands for now, in index order (stale entries skipped)."""
    return (job for e in ix.entries if (job := ix.job(e)) is not None)


def longest_first(ix: LengthIndex) -> Iterator[PendingJob]:
    """A request's schedulable texts, longest next piece first, equal lengths in the request's
    order, lazily (the anchor reads only what it takes). Why this order: a round is padded to
    its longest piece; taken in text order, short and long completions mixed and about a third
    of each batch was padding (measured)."""
    entries, end = ix.entries, len(ix.entries)
    while end > 0:
        tokens = entries[end - 1][0]
        start = bisect.bisect_left(entries, (tokens, -1), 0, end)
        for e in entries[start:end]:
            job = ix.job(e)
            if job is not None:
                yield job
        end = start


def left_at_most(jobs: Iterable[PendingJob], tokens: int) -> bool:
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


class Views:
    """The fill's candidates, read from the indices of the requests in rotation `order`: per
    request, the entries nearest a length, skipping texts the round already holds (`taken`,
    offered by the fill itself), texts the fill in progress passed over (`skip`), and texts an
    earlier request also holds (a shared text is a candidate of the first request in rotation
    that has it, and is taken for that request)."""

    def __init__(
        self, order: Sequence[PendingRequest], ixs: list[LengthIndex], taken: Mapping[int, object]
    ) -> None:
        self.order, self.ixs, self.taken = order, ixs, taken
        self.skip: set[int] = set()
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
        """The entry's text if the fill may take it for request `rank` now."""
        job = self.ixs[rank].job(e)
        if job is None:
            return None
        key = id(job)
        if key in self.taken or key in self.skip:
            return None
        if rank and key in self._shared[rank] and self._first_holder(key) != rank:
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
