"""Dynamic, fair batching: requests are split into pieces, served round-robin in bounded slices.

Why one worker thread: the model already uses every core for one batch, so two concurrent
forward passes only fight over caches; a single consumer merges whatever is queued into one
longest-first, token-budgeted round (the encoder shapes the forward passes).

Why slices: a request is split into pieces (a text, or one window of a long text) and each
round takes at most `slice_tokens` of every active request (all of it when what is left fits
in a round), least recently served first, up to `round_tokens` in all. One request with a 5 MB
completion (thousands of windows) therefore advances a slice per round while a small request
that arrives meanwhile is served whole in the next round: the largest allowed request delays a
small one by about one slice plus the small request's own work, not by its whole length.

Identical texts in flight are computed once, whichever requests asked for them. The event loop
only enqueues and awaits a future; tokenising (`split`) runs in a helper thread.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from reweighter.embedding.base import Encoder, Piece, with_tail
from reweighter.errors import NotReady, Overloaded
from reweighter.timings import RequestTimings
from reweighter.timings import current as current_timings

log = logging.getLogger(__name__)

OnComputed = Callable[[list[str], np.ndarray], None]


@dataclass(eq=False)
class _Job:
    """One distinct text in flight; shared by every request that asked for it."""

    text: str
    pieces: list[Piece] | None = None  # None until split
    vecs: np.ndarray | None = None
    scheduled: int = 0  # pieces handed to a round
    done: int = 0  # pieces computed
    result: np.ndarray | None = None
    error: BaseException | None = None
    waiters: list[_Request] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None

    @property
    def schedulable(self) -> bool:
        return self.pieces is not None and not self.finished and self.scheduled < len(self.pieces)


def _longest_first(jobs: list[_Job]) -> list[_Job]:
    """A request's schedulable texts, longest next piece first: the order an anchor hands them
    over in. Why: a round is padded to its longest piece; taken in text order, short and long
    completions mixed and about a third of each batch was padding (measured)."""
    ready = [j for j in jobs if j.schedulable]
    ready.sort(key=lambda j: j.pieces[j.scheduled].tokens, reverse=True)  # type: ignore[index]
    return ready


@dataclass(eq=False)
class _Request:
    jobs: list[_Job]
    index: list[int]  # text i of the request -> jobs[index[i]]
    future: asyncio.Future[np.ndarray]
    loop: asyncio.AbstractEventLoop
    open_jobs: int = 0
    resolved: bool = False
    seq: int = 0  # arrival order
    turn: int = -1  # the last round that served it (-1: never)
    timings: RequestTimings | None = None  # filled in for the service's metrics, if collected
    submitted: float = field(default_factory=time.perf_counter)

    @property
    def live(self) -> bool:
        return not self.resolved and not self.future.cancelled()


# A round: per request, the (job, first piece, end piece) ranges it contributed.
_Slice = tuple[_Request, list[tuple[_Job, int, int]]]


def _resolve(fut: asyncio.Future, value: np.ndarray | None, exc: BaseException | None) -> None:
    if fut.done():  # the caller was cancelled (client went away): nothing to deliver
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class _RoundBuilder:
    """The pieces of one round within its padded budget (rows x longest piece <= tokens)."""

    def __init__(self, tokens: int, max_pieces: int) -> None:
        self.tokens, self.max_pieces = tokens, max_pieces
        self.count = self.longest = 0
        self.full = False
        self._ranges: dict[int, list] = {}  # id(job) -> [request, rank, job, start, end]

    @property
    def anchored(self) -> bool:
        """Whether the round holds anything yet (only an anchor adds before the fill)."""
        return self.count > 0

    def _room(self, cost: int) -> bool:
        if not self.count:
            return True  # a round takes at least one piece, whatever its size
        return (
            self.count < self.max_pieces
            and (self.count + 1) * max(self.longest, cost) <= self.tokens
        )

    def _add(self, req: _Request, rank: int, job: _Job) -> int:
        assert job.pieces is not None
        cost = job.pieces[job.scheduled].tokens
        entry = self._ranges.get(id(job))
        if entry is None:
            self._ranges[id(job)] = [req, rank, job, job.scheduled, job.scheduled + 1]
        else:
            entry[4] += 1
        job.scheduled += 1
        self.count += 1
        self.longest = max(self.longest, cost)
        return cost

    def anchor(self, req: _Request, rank: int, jobs: list[_Job], limit: int) -> None:
        """The fair part: up to `limit` tokens of whole pieces of `req`, longest texts first."""
        used = 0
        for job in jobs:
            assert job.pieces is not None
            while job.scheduled < len(job.pieces):
                cost = job.pieces[job.scheduled].tokens
                if used and used + cost > limit:
                    return
                if not self._room(cost):
                    self.full = True
                    return
                used += self._add(req, rank, job)

    def fill(self, candidates: list[tuple[int, _Request, _Job]]) -> None:
        """Work-conserving: add, one at a time, the pending piece that wastes least padding.

        A piece no longer than the round's longest wastes (longest - its length); a longer one
        pads every piece already in by the difference. Among equal waste, the older request.
        """
        below: list[tuple[int, int, int]] = []  # (tokens, -rank, i), ascending: best at the end
        above: list[tuple[int, int, int]] = []  # (tokens, rank, i): best = smallest

        def offer(i: int) -> None:
            rank, _, job = candidates[i]
            assert job.pieces is not None
            if job.scheduled >= len(job.pieces):
                return
            cost = job.pieces[job.scheduled].tokens
            if cost <= self.longest:
                bisect.insort(below, (cost, -rank, i))
            else:
                heapq.heappush(above, (cost, rank, i))

        for i in range(len(candidates)):
            offer(i)
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
            self._add(req, rank, job)
            offer(i)  # the same text's next window, if it has one

    def take_tail(self, candidates: list[tuple[int, _Request, _Job]]) -> None:
        """`candidates` is all pending work: take what is left if the round then stays within
        `base.with_tail` of its budget (measured: a pass of 1-3 left-over pieces took 42-97 ms
        against 330-420 ms for a full one on 2 cores)."""
        if not self.count:
            return
        limit = with_tail(self.tokens)
        rows, longest = self.count, self.longest
        for _, _, job in candidates:  # stops as soon as it cannot fit: a huge text costs O(1)
            assert job.pieces is not None
            for k in range(job.scheduled, len(job.pieces)):
                rows += 1
                longest = max(longest, job.pieces[k].tokens)
                if rows > self.max_pieces or rows * longest > limit:
                    return
        for rank, req, job in candidates:
            assert job.pieces is not None
            while job.scheduled < len(job.pieces):
                self._add(req, rank, job)

    def slices(self) -> list[_Slice]:
        """Per request (the one each job was taken for), its job ranges, in rank order."""
        grouped: dict[int, tuple[int, _Request, list[tuple[_Job, int, int]]]] = {}
        for req, rank, job, start, end in self._ranges.values():
            grouped.setdefault(id(req), (rank, req, []))[2].append((job, start, end))
        return [(req, ranges) for _, req, ranges in sorted(grouped.values(), key=lambda g: g[0])]


class DynamicBatcher:
    """Requests -> pieces -> fair rounds in one worker thread -> per-request futures.

    `max_queue` bounds the requests waiting or running; beyond it `submit` raises `Overloaded`
    at once (a 429 the client retries), rather than letting latency grow without bound.
    A request with at most `slice_tokens` left is served whole in the round it anchors;
    `round_tokens` (and `max_round_pieces`) bound one round. `lock` is held around every model
    call so synchronous callers can share the model safely. `on_computed(texts, vectors)` runs
    in the worker for every finished batch of texts (cache write-back, counters).
    """

    def __init__(
        self,
        encoder: Encoder,
        *,
        slice_tokens: int = 1024,
        round_tokens: int | None = None,
        max_round_pieces: int = 4096,
        max_queue: int = 1024,
        lock: threading.Lock | None = None,
        on_computed: OnComputed | None = None,
        name: str = "reweighter-embed",
    ) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if slice_tokens < 1:
            raise ValueError("slice_tokens must be at least 1")
        self.encoder = encoder
        self.slice_tokens = slice_tokens
        self.round_tokens = round_tokens or 4 * slice_tokens
        self.max_round_pieces = max_round_pieces
        self.max_queue = max_queue
        self._on_computed = on_computed
        self._lock = lock or threading.Lock()
        self._name = name
        self._active: list[_Request] = []  # served least recently served first
        self._round = self._seq = 0
        self._inflight: dict[str, _Job] = {}
        self._cond = threading.Condition()
        self._pending = 0  # requests waiting or running
        self._preparing = 0  # distinct texts being split (tokenised) before they can run
        self._closing = False
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def preparing(self) -> int:
        return self._preparing

    # -- the event-loop side ------------------------------------------------------------------
    async def submit(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for `texts` ([N, D]), computed fairly alongside whatever else is queued."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[np.ndarray] = loop.create_future()
        texts = list(texts)
        new: list[_Job] = []
        with self._cond:
            if self._closing:
                raise NotReady("the embedder is shutting down")
            if self._pending >= self.max_queue:
                raise Overloaded(
                    f"embedding queue is full ({self.max_queue} requests waiting or running)"
                )
            jobs: list[_Job] = []
            slot: dict[str, int] = {}
            index = []
            for t in texts:
                if t not in slot:
                    job = self._inflight.get(t)
                    if job is None:
                        job = self._inflight[t] = _Job(t)
                        new.append(job)
                    slot[t] = len(jobs)
                    jobs.append(job)
                index.append(slot[t])
            self._seq += 1
            req = _Request(jobs, index, fut, loop, open_jobs=len(jobs), seq=self._seq)
            req.timings = current_timings()
            for job in jobs:
                job.waiters.append(req)
            self._pending += 1
            self._preparing += len(new)
            self._active.append(req)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        # A caller that goes away stops asking (its texts still finish if others share them).
        fut.add_done_callback(lambda f: self._finish_request(req) if f.cancelled() else None)
        if not jobs:
            self._finish_request(req)
        try:
            if new:
                # Tokenising a huge text takes a while: off the loop and off the model's thread.
                # The helper thread attaches the pieces itself, so a cancelled caller cannot
                # leave jobs that other requests share half-prepared.
                await asyncio.to_thread(self._prepare, new)
            return await fut
        except asyncio.CancelledError:
            fut.cancel()
            raise

    def _prepare(self, jobs: list[_Job]) -> None:
        try:
            pieces = self.encoder.split([j.text for j in jobs])
        except Exception:
            for job in jobs:  # find the culprit: only its callers see the error
                try:
                    self._attach(job, self.encoder.split([job.text]))
                except Exception as exc:
                    with self._cond:
                        self._preparing -= 1
                    self._fail(job, exc)
            return
        per_job: list[list[Piece]] = [[] for _ in jobs]
        for p in pieces:
            per_job[p.text].append(p)
        for job, own in zip(jobs, per_job, strict=True):
            try:
                self._attach(job, own)
            except RuntimeError as exc:
                with self._cond:
                    self._preparing -= 1
                self._fail(job, exc)

    def _attach(self, job: _Job, pieces: list[Piece]) -> None:
        if not pieces:
            raise RuntimeError("the encoder split a text into no pieces")
        with self._cond:
            job.pieces = pieces
            job.vecs = np.empty((len(pieces), self.encoder.dim), dtype=np.float32)
            self._preparing -= 1
            self._cond.notify()

    # -- the worker side ----------------------------------------------------------------------
    def _take(self) -> list[_Slice] | None:
        """The next round (`_take_locked`), waiting for work."""
        with self._cond:
            while True:
                taken = self._take_locked()
                if taken:
                    return taken
                if self._closing and not self._active:
                    return None
                self._cond.wait()

    def _take_locked(self) -> list[_Slice]:
        """One round: the least recently served request's slice, then the rest of the padded
        budget filled with whichever pending pieces pad least against it.

        Why not a slice from every request in turn: each request hands over its own longest
        texts, and eight requests' longest texts differ, so every round padded to the longest of
        a mixed set (padding efficiency 0.93 against 0.99 for one global sort); and a request
        alone got only its slice per round, a quarter of a pass (128 texts in one request ran in
        57 passes where a global sort needs 13). Fairness stays with the anchor: a request not
        served in a round moves ahead of every request that was, so it anchors a round within
        as many rounds as there are active requests (in practice the next one or two: the fill
        serves most requests every round), and a newcomer anchors the very next round.
        """
        self._active = [r for r in self._active if r.live]  # drop finished requests
        self._round += 1
        # Least recently served first (never served: first), then arrival order.
        order = sorted(self._active, key=lambda r: (r.turn, r.seq))
        rnd = _RoundBuilder(self.round_tokens, self.max_round_pieces)
        for rank, req in enumerate(order):
            if rnd.anchored:
                break
            # A request with at most a slice left is served whole in the round it anchors (a
            # small request is answered after one round); otherwise its longest piece anchors
            # the round and the fill adds what pads least (whole requests of mixed lengths as
            # anchors padded every round to their longest: 0.956 against 0.973).
            limit = self.slice_tokens if self._left_at_most(req, self.slice_tokens) else 1
            rnd.anchor(req, rank, _longest_first(req.jobs), limit)
        if rnd.anchored and not rnd.full:
            candidates, complete = self._candidates(order)
            rnd.fill(candidates)
            if complete:
                rnd.take_tail(candidates)
        taken = rnd.slices()
        for req, _ in taken:
            if req.turn == -1 and req.timings is not None:
                req.timings.queue_s = time.perf_counter() - req.submitted
            req.turn = self._round
        return taken

    def _candidates(self, order: list[_Request]) -> tuple[list[tuple[int, _Request, _Job]], bool]:
        """(rank, request, job) of schedulable jobs, oldest requests first, bounded: a round
        never needs more than a few times the pieces it can hold; and whether that is all."""
        out: list[tuple[int, _Request, _Job]] = []
        seen: set[int] = set()
        cap = max(256, 4 * min(self.max_round_pieces, 1024))
        for rank, req in enumerate(order):
            for job in req.jobs:
                if job.schedulable and id(job) not in seen:
                    seen.add(id(job))
                    out.append((rank, req, job))
            if len(out) >= cap:
                return out, rank == len(order) - 1
        return out, True

    @staticmethod
    def _left_at_most(req: _Request, tokens: int) -> bool:
        """Whether `req` has at most `tokens` left to schedule (reads no further than that)."""
        left = 0
        for job in req.jobs:
            if job.schedulable:
                assert job.pieces is not None
                for k in range(job.scheduled, len(job.pieces)):
                    left += job.pieces[k].tokens
                    if left > tokens:
                        return False
        return True

    def _run(self) -> None:
        while (round_ := self._take()) is not None:
            try:
                self._serve(round_)
            except BaseException as exc:  # never let the worker die with callers waiting
                log.exception("embedding round failed unexpectedly")
                for _, ranges in round_:
                    for job, _, _ in ranges:
                        self._fail(job, exc)

    def _embed(self, pieces: list[Piece]) -> np.ndarray:
        with self._lock:
            out = self.encoder.embed_pieces(pieces)
        if out.shape[0] != len(pieces):
            raise RuntimeError(f"encoder returned {out.shape[0]} vectors for {len(pieces)} pieces")
        return out

    @staticmethod
    def _pieces(ranges: list[tuple[_Job, int, int]]) -> list[Piece]:
        return [p for job, s, e in ranges for p in job.pieces[s:e]]  # type: ignore[index]

    def _serve(self, round_: list[_Slice]) -> None:
        try:
            vecs = self._embed(self._pieces([r for _, ranges in round_ for r in ranges]))
        except Exception as merged_exc:
            if len(round_) == 1:
                for job, _, _ in round_[0][1]:
                    self._fail(job, merged_exc)
                return
            # Find who caused it: rerun each request's slice alone, so only its callers fail.
            log.warning("merged embedding batch failed (%s); retrying per request", merged_exc)
            for _, ranges in round_:
                try:
                    self._store(ranges, self._embed(self._pieces(ranges)))
                except Exception as exc:
                    for job, _, _ in ranges:
                        self._fail(job, exc)
            return
        self._store([r for _, ranges in round_ for r in ranges], vecs)

    def _store(self, ranges: list[tuple[_Job, int, int]], vecs: np.ndarray) -> None:
        at = 0
        finished: list[_Job] = []
        with self._cond:
            for job, s, e in ranges:
                if job.finished or job.vecs is None or job.pieces is None:
                    at += e - s  # abandoned meanwhile (its callers failed or went away)
                    continue
                job.vecs[s:e] = vecs[at : at + e - s]
                at += e - s
                job.done += e - s
                if job.done == len(job.pieces):
                    job.result = self.encoder.pool(job.pieces, job.vecs)
                    job.vecs = None
                    finished.append(job)
        if not finished:
            return
        if self._on_computed is not None:
            try:
                vecs = np.stack([j.result for j in finished])  # type: ignore[misc]
                self._on_computed([j.text for j in finished], vecs)
            except Exception:  # bookkeeping must never fail a request
                log.exception("on_computed hook failed")
        for job in finished:
            self._complete(job)

    def _fail(self, job: _Job, exc: BaseException) -> None:
        with self._cond:
            if job.finished:
                return
            job.error = exc
        self._complete(job)

    def _complete(self, job: _Job) -> None:
        ready: list[_Request] = []
        with self._cond:
            if self._inflight.get(job.text) is job:
                del self._inflight[job.text]
            for req in job.waiters:
                req.open_jobs -= 1
                if job.error is not None or req.open_jobs == 0:
                    ready.append(req)
            job.waiters = []
        for req in ready:
            self._finish_request(req)

    def _finish_request(self, req: _Request) -> None:
        """Resolve once: all its texts done, one failed, or its caller went away."""
        with self._cond:
            if req.resolved:
                return
            req.resolved = True
            self._pending -= 1
            error = next((j.error for j in req.jobs if j.error is not None), None)
            value = None
            if error is None and all(j.result is not None for j in req.jobs):
                value = (
                    np.stack([req.jobs[i].result for i in req.index])  # type: ignore[misc]
                    if req.index
                    else np.zeros((0, self.encoder.dim), dtype=np.float32)
                )
            # Stop working on texts nobody else is waiting for.
            for job in req.jobs:
                if req in job.waiters:
                    job.waiters.remove(req)
                if not job.waiters and not job.finished:
                    if self._inflight.get(job.text) is job:
                        del self._inflight[job.text]
                    job.error = NotReady("abandoned: every caller went away")
            self._cond.notify_all()
        if error is not None or value is not None:
            self._deliver(req, value, error)

    @staticmethod
    def _deliver(r: _Request, value: np.ndarray | None, exc: BaseException | None) -> None:
        # A closed loop means nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            r.loop.call_soon_threadsafe(_resolve, r.future, value, exc)

    async def aclose(self) -> None:
        """Refuse new work, finish what is queued or running, stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
