"""Packing one round: the anchor, the fill by least padding, the tail. Reads the pending work
through the length indices (index.py) and records what it takes in a `Round`, never in the
jobs (the planner is pure; the batcher's worker applies the round).

Why by least padding: a round is one forward pass, padded to its longest piece. The fill adds,
one at a time, the pending piece that wastes least: a piece no longer than the round's longest
wastes (longest - its length); a longer one pads every piece already in by the difference.
Among equal waste, the older request (then the later text of that request, as the scan, the
tests' oracle, ordered its candidates). Found by bisection from the round's longest in each
request's index: a round costs what it takes, not what is queued.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from reweighter.embedding.base import Budget
from reweighter.embedding.plan.index import (
    LengthIndex,
    Views,
    indexed_jobs,
    left_at_most,
    longest_first,
)
from reweighter.embedding.plan.pending import PendingJob, PendingRequest, Range, Slice, tenant_of


@dataclass
class _Open:
    """A range being built: the request it was taken for, that request's rank, the job."""

    request: PendingRequest
    rank: int
    job: PendingJob
    start: int
    end: int


class Round:
    """The pieces of one round within its padded budget, with cursors of its own."""

    def __init__(self, batch: Budget) -> None:
        self.batch = batch
        self.count = self.longest = 0
        self.full = False
        self.taken: dict[int, _Open] = {}  # id(job) -> its range in this round
        self.used: dict[str, int] = {}  # tenant -> tokens of its pieces in this round

    def at(self, job: PendingJob) -> int:
        """The job's next piece, counting what this round already took."""
        taken = self.taken.get(id(job))
        return job.scheduled if taken is None else taken.end

    def room(self, cost: int) -> bool:
        """Whether one more piece of `cost` tokens fits the padded budget."""
        if not self.count:
            return True  # a round takes at least one piece, whatever its size
        return self.batch.fits(self.count + 1, max(self.longest, cost))

    def add(self, req: PendingRequest, rank: int, job: PendingJob) -> int:
        """Take `job`'s next piece for `req` (rotation rank `rank`); its tokens."""
        assert job.pieces is not None
        taken = self.taken.get(id(job))
        if taken is None:
            taken = self.taken[id(job)] = _Open(req, rank, job, job.scheduled, job.scheduled)
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
        """The fair part: up to `limit` tokens of whole pieces of `req`, in the order given."""
        used = 0
        for job in jobs:
            assert job.pieces is not None
            while (k := self.at(job)) < len(job.pieces):
                cost = job.pieces[k].tokens
                if used and used + cost > limit:
                    return
                if not self.room(cost):
                    self.full = True
                    return
                used += self.add(req, rank, job)

    def slices(self) -> list[Slice]:
        """Per request (the one each job was taken for), its job ranges, in rank order."""
        grouped: dict[int, tuple[int, PendingRequest, list[Range]]] = {}
        for o in self.taken.values():
            grouped.setdefault(id(o.request), (o.rank, o.request, []))[2].append(
                Range(o.job, o.start, o.end)
            )
        ordered = sorted(grouped.values(), key=lambda g: g[0])
        return [Slice(req, tuple(ranges)) for _, req, ranges in ordered]


def anchor_round(
    rnd: Round, order: Sequence[PendingRequest], ixs: list[LengthIndex], slice_tokens: int
) -> None:
    """The first request in rotation with work anchors the round: whole when at most a slice
    of it is left (a small request is answered after one round), else its longest next piece
    alone (the fill adds what pads least: whole requests of mixed lengths as anchors padded
    every round to their longest, 0.956 padding efficiency against 0.973)."""
    for rank, req in enumerate(order):
        if rnd.count:
            return
        whole = left_at_most(indexed_jobs(ixs[rank]), slice_tokens)
        rnd.anchor(req, rank, longest_first(ixs[rank]), slice_tokens if whole else 1)


def fill(
    rnd: Round, views: Views, parts: Mapping[str, float] | None = None, pad: bool = True
) -> None:
    """Work-conserving: add, one at a time, the pending piece that wastes least padding, until
    the round is full or nothing is left. `parts` (tenant -> tokens): a tenant's pieces are
    taken only while its pieces in the round stay within its part (the caller fills again
    without). `pad=False`: only pieces no longer than the round's longest (the round's padded
    length, hence its time, stays what the anchor made it)."""
    _Fill(rnd, views, parts, pad).run()


_Head = tuple[int, int, int, int, int]  # below: (-cost, rank, -pos, at, ver); above: +cost, +pos
_Key = tuple[int, int, int]  # below: (cost, -rank, pos), best = max; above: (cost, rank, pos)


class _Fill:
    """One fill's state. Candidates come from two places: the texts the round already holds
    (their next pieces, in the lists `below` and `above`), and per request two heads read
    from its index: its best entry of at most the round's longest (`head_below`) and its
    shortest entry over it (`head_above`). A request's heads are recomputed when it is picked
    from, or when the round's longest passes its head above (only then can its entries change
    sides); superseded heads stay in the heaps, marked by a version, and are skipped.

    With `parts`, a request's entries are read only up to what its tenant could still add
    when the fill began (`most`), and a piece whose tenant reached its part meanwhile is
    passed over when picked (`Views.skip`): the scan's candidates exactly, offered once and
    dropped when picked, so that the same rounds come out."""

    __slots__ = ("rnd", "views", "parts", "pad", "tenants", "most", "below", "above", "held",
                 "bver", "aver", "head_below", "head_above", "cap", "heads_above")  # fmt: skip

    def __init__(
        self, rnd: Round, views: Views, parts: Mapping[str, float] | None, pad: bool
    ) -> None:
        n = len(views.order)
        self.rnd, self.views, self.parts, self.pad = rnd, views, parts, pad
        self.tenants = [] if parts is None else [tenant_of(r) for r in views.order]
        self.most = None if parts is None else self._most(parts)
        self.below: list[_Key] = []  # the round's texts' next pieces, ascending
        self.above: list[_Key] = []  # a heap
        self.held: dict[tuple[int, int], tuple[PendingRequest, PendingJob]] = {}
        self.bver, self.aver = [0] * n, [0] * n
        self.head_below: list[_Head] = []
        self.head_above: list[_Head] = []
        # once the fill gave up on longer pieces (or never pads), those stay out
        self.cap: int | None = None if pad else rnd.longest
        self.heads_above = pad
        views.skip.clear()

    def _most(self, parts: Mapping[str, float]) -> list[int]:
        """Per request, the longest piece its tenant may still add (as `over` decides it)."""
        used, most = self.rnd.used, {}
        for t in set(self.tenants):
            u, part = used.get(t, 0), parts.get(t, 0)
            c = int(part - u) + 1
            while c >= 0 and u + c > part:
                c -= 1
            most[t] = c
        return [most[t] for t in self.tenants]

    def over(self, rank: int, cost: int) -> bool:
        """Whether a piece of `cost` for request `rank` would take its tenant past its part."""
        t = self.tenants[rank]
        return self.rnd.used.get(t, 0) + cost > self.parts.get(t, 0)  # type: ignore[union-attr]

    def offer(self, rank: int, req: PendingRequest, job: PendingJob) -> None:
        """A text the round holds: its next piece, if it has one, becomes a candidate."""
        assert job.pieces is not None
        k = self.rnd.at(job)
        if k >= len(job.pieces):
            return
        cost = job.pieces[k].tokens
        if self.parts is not None and self.over(rank, cost):
            return
        if not self.pad and cost > self.rnd.longest:
            return
        pos = self.views.ixs[rank].pos[id(job)]
        self.held[rank, pos] = (req, job)
        if cost <= self.rnd.longest:
            bisect.insort(self.below, (cost, -rank, pos))
        else:
            heapq.heappush(self.above, (cost, rank, pos))

    def push_below(self, rank: int, start: int | None = None) -> None:
        """Request `rank`'s head below: its best usable entry (from `start` down)."""
        ver, views, cap, most = self.bver, self.views, self.cap, self.most
        ver[rank] += 1
        limit = self.rnd.longest
        if cap is not None and cap < limit:
            limit = cap
        if most is not None and most[rank] < limit:
            limit = most[rank]
        got = views.below(rank, limit, start)
        if got is not None:
            at, cost = got
            pos = views.ixs[rank].entries[at][1]
            heapq.heappush(self.head_below, (-cost, rank, -pos, at, ver[rank]))

    def push_above(self, rank: int, start: int | None = None) -> None:
        """Request `rank`'s head above: its shortest usable entry over the round's longest."""
        ver, views, most = self.aver, self.views, self.most
        ver[rank] += 1
        if not self.heads_above:
            return
        got = views.above(rank, self.rnd.longest, start)
        if got is None or (most is not None and got[1] > most[rank]):
            return
        at, cost = got
        pos = views.ixs[rank].entries[at][1]
        heapq.heappush(self.head_above, (cost, rank, pos, at, ver[rank]))

    def grew(self, longest: int) -> None:
        """The round's longest grew to `longest`: what it passed is below now."""
        while self.above and self.above[0][0] <= longest:
            cost, rank, pos = heapq.heappop(self.above)
            bisect.insort(self.below, (cost, -rank, pos))
        while (h := _top(self.head_above, self.aver)) is not None and h[0] <= longest:
            self.push_below(h[1])
            self.push_above(h[1])

    def give_up_longer(self) -> None:
        """Nothing longer than the round's longest fits any more (shorter pieces still might):
        heads above dropped, entries read up to the round's longest from now on."""
        self.above.clear()
        self.heads_above = False
        self.aver = [v + 1 for v in self.aver]
        self.cap = self.rnd.longest if self.cap is None else self.cap

    def pick(
        self, key: _Key, head: _Head | None, below: bool
    ) -> tuple[int, PendingRequest, PendingJob]:
        """Remove the candidate `key` (from its list, or advance its request's head past it)."""
        if head is None:
            if below:
                self.below.pop()
                rank, pos = -key[1], key[2]
            else:
                heapq.heappop(self.above)
                rank, pos = key[1], key[2]
            req, job = self.held[rank, pos]
            return rank, req, job
        rank = head[1]
        job = self.views.ixs[rank].jobs[head[2] if not below else -head[2]]
        if below:
            self.push_below(rank, head[3] - 1)
        else:
            self.push_above(rank, head[3] + 1)
        return rank, self.views.order[rank], job

    def step(self) -> bool:
        """Take (or pass over) the candidate that wastes least; False once the fill is done.
        The best below and above each come from the held lists or a request's head; a key
        from the lists comes with None for its head."""
        rnd, below, above = self.rnd, self.below, self.above
        best_b: _Key | None = below[-1] if below else None
        hb = _top(self.head_below, self.bver)
        if hb is not None:
            if best_b is None or (-hb[0], -hb[1], -hb[2]) > best_b:
                best_b = (-hb[0], -hb[1], -hb[2])
            else:
                hb = None
        best_a: _Key | None = above[0] if above else None
        ha = _top(self.head_above, self.aver)
        if ha is not None:
            if best_a is None or ha[:3] < best_a:
                best_a = ha[:3]
            else:
                ha = None
        if best_b is None:
            if best_a is None:
                return False
            use_below = False
        else:  # least waste: longest - cost below, rows x (cost - longest) above
            use_below = best_a is None or (
                rnd.longest - best_b[0] <= rnd.count * (best_a[0] - rnd.longest)
            )
        cost = best_b[0] if use_below else best_a[0]  # type: ignore[index]
        if not rnd.room(cost):
            if use_below or best_b is None:
                rnd.full = True
                return False
            self.give_up_longer()
            return True
        if use_below:
            rank, req, job = self.pick(best_b, hb, True)  # type: ignore[arg-type]
        else:
            rank, req, job = self.pick(best_a, ha, False)  # type: ignore[arg-type]
        if self.parts is not None and self.over(rank, cost):
            self.views.skip.add(id(job))  # its tenant reached its part meanwhile: passed over
            return True
        rnd.add(req, rank, job)
        self.offer(rank, req, job)  # the same text's next window, if it has one
        return True

    def run(self) -> None:
        rnd = self.rnd
        for o in list(rnd.taken.values()):  # the round's texts with pieces left
            self.offer(o.rank, o.request, o.job)
        for rank in range(len(self.views.order)):
            self.push_below(rank)
            self.push_above(rank)
        longest = rnd.longest
        while not rnd.full:
            if rnd.longest != longest:
                longest = rnd.longest
                self.grew(longest)
            if not self.step():
                break
        self.views.skip.clear()


def _top(heap: list[_Head], ver: list[int]) -> _Head | None:
    """The heap's current head (superseded ones popped)."""
    while heap and heap[0][4] != ver[heap[0][1]]:
        heapq.heappop(heap)
    return heap[0] if heap else None


def take_tail(rnd: Round, views: Views) -> None:
    """Everything pending (the indices and the texts the round holds): take it all if the round
    then stays within `Budget.fits_with_tail` (measured: a pass of 1-3 left-over pieces took
    42-97 ms against 330-420 ms for a full one on 2 cores); reads no further than a round's
    worth when it does not."""
    if not rnd.count:
        return
    held = (
        (o.rank, views.ixs[o.rank].pos[id(o.job)], o.request, o.job)
        for o in list(rnd.taken.values())
    )
    queued = ((rank, e[1], views.order[rank], job) for rank, ix in enumerate(views.ixs)
              for e in ix.entries if (job := views.usable(rank, e)) is not None)  # fmt: skip
    left = _tail_within_bound(rnd, itertools.chain(held, queued))
    if left is None:
        return
    left.sort(key=lambda t: (t[0], t[1]))
    for rank, _, req, job in left:
        assert job.pieces is not None
        while rnd.at(job) < len(job.pieces):
            rnd.add(req, rank, job)


_Pending = tuple[int, int, PendingRequest, PendingJob]  # (rank, position, request, text)


def _tail_within_bound(rnd: Round, pending: Iterator[_Pending]) -> list[_Pending] | None:
    """All of `pending` if the round with all of it stays within `fits_with_tail`, else None;
    stops reading as soon as it cannot fit (a huge queue costs a round's worth)."""
    rows, longest = rnd.count, rnd.longest
    left: list[_Pending] = []
    for item in pending:
        left.append(item)
        job = item[3]
        assert job.pieces is not None
        for k in range(rnd.at(job), len(job.pieces)):
            rows += 1
            longest = max(longest, job.pieces[k].tokens)
            if not rnd.batch.fits_with_tail(rows, longest):
                return None
    return left
