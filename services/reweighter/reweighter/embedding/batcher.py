"""Dynamic, fair batching: requests are split into pieces, served in bounded, fair rounds.

Why one worker thread: the model already uses every core for one batch, so two concurrent
forward passes only fight over caches; a single consumer merges whatever is queued into one
longest-first, token-budgeted round (the encoder shapes the forward passes).

Why slices: a request is split into pieces (a text, or one window of a long text), and each
round is anchored by the least recently served request (all of it when at most `slice_tokens`
is left) and filled with what pads least, up to `round_tokens` (the policy: `plan.plan`). One
request with a 5 MB completion (thousands of windows) therefore advances between others while
a small request that arrives meanwhile is served whole in the next round: the largest allowed
request delays a small one by about one round plus the small request's own work.

Who owns what (`jobs`): the worker thread owns the queue (the requests in rotation, every
text's pieces and cursor) and plans each round with no lock held; the event loop only
registers a request and posts it to the worker's inbox; tokenising (`split`) runs in a helper
thread (`SplitLanes`) that posts the pieces. Identical texts in flight are computed once,
whichever requests asked for them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import cast

import numpy as np

from reweighter.embedding.base import Budget, Encoder, Piece
from reweighter.embedding.jobs import Abandon, Job, Message, NewRequest, Request, Split
from reweighter.embedding.plan import (
    LINGER_ROUNDS,
    LengthIndex,
    Range,
    RoundBudget,
    Slice,
    plan,
    round_budget,
    tenants_around,
)
from reweighter.errors import DeadlineExceeded, NotReady, Overloaded
from reweighter.tenancy import Tenant, current, current_deadline
from reweighter.timings import current as current_timings

log = logging.getLogger(__name__)

OnComputed = Callable[[list[str], np.ndarray], None]
Round = list[Slice[Request, Job]]


LARGE_SPLIT_CHARS = 256 * 1024
"""A request whose new texts hold more characters than this is tokenised in the large lane
(`SplitLanes`). Why 256 KiB: at 0.15-0.4 us per character (MiniLM's tokenizer, BENCHMARKS Y)
that is 40-100 ms of tokenising, about one CPU round: a small request waits at most about that
long behind others in its lane, never behind a 4 MB one."""


def split_threads() -> int:
    """Threads per tokenising lane: half the cores this process may use, 1 to 4. Why: the
    tokenizer releases the GIL, so a few threads keep a GPU fed (one thread tokenises ~5,000-
    7,000 160-word completions a second, an H200 encodes ~19,000), and the other half of the
    cores stays with the event loop and the encoder's thread. asyncio's default executor
    (cores + 4 threads) tokenised at the same CPU per completion (0.18 ms against 0.17-0.18
    in one lane thread; BENCHMARKS Z): the lanes' gain is the event loop's, not the threads'."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores // 2))


class SplitLanes:
    """Where requests' texts are tokenised: two small pools of threads of our own, one for
    ordinary requests and one for large ones (over `large_chars`).

    Why not `asyncio.to_thread`: the event loop would wait on each request's tokenising (a
    wake-up per request, from a thread of asyncio's shared executor), and it need not: the
    helper posts the pieces to the worker itself. Why two lanes: with one pool, a request of
    4 MB would hold a thread for a second or more and small requests behind it would wait
    (the fairness probes, tests/embedding/test_batcher.py); in their own lane they never do.
    Threads start on first use and stop with `shutdown`."""

    def __init__(self, name: str, threads: int | None = None, large_chars: int = LARGE_SPLIT_CHARS):
        self.name, self.large_chars = name, large_chars
        self.threads = threads or split_threads()
        self._pools: dict[bool, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[[list[Job]], None], jobs: list[Job]) -> Future[None]:
        """Run `fn(jobs)` in the lane the texts' size picks. Raises RuntimeError once shut down."""
        large = sum(len(j.text) for j in jobs) > self.large_chars
        with self._lock:
            if self._shut:
                raise RuntimeError("the tokenising lanes are shut down")
            pool = self._pools.get(large)
            if pool is None:
                suffix = "split-large" if large else "split"
                pool = self._pools[large] = ThreadPoolExecutor(
                    self.threads, thread_name_prefix=f"{self.name}-{suffix}"
                )
        return pool.submit(fn, jobs)

    def shutdown(self) -> None:
        """Stop the threads once their queued work is done (without waiting for it)."""
        with self._lock:
            self._shut = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=False)


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
        self.encoder = encoder  # runs the model: embed_pieces, dim
        self.stage = encoder.stage  # tokenises and pools (split, pool): no model in it
        self.slice_tokens = slice_tokens
        self.round_tokens = round_tokens or 4 * slice_tokens
        self.max_round_pieces = max_round_pieces
        self.max_queue = max_queue
        self._on_computed = on_computed
        self._model_lock = lock or threading.Lock()
        self._name = name
        self._lanes = SplitLanes(name)
        # Shared, under `_cond` (held briefly: never while planning or computing).
        self._cond = threading.Condition()
        self._inbox: list[Message] = []
        self._inflight: dict[str, Job] = {}
        self._seq = 0
        self._pending = 0  # requests waiting or running
        self._preparing = 0  # distinct texts being split (tokenised) before they can run
        self._closing = False
        self._thread: threading.Thread | None = None
        self._by_tenant: dict[str, int] = {}  # requests waiting or running, per tenant
        self.dropped = 0  # requests dropped unserved: deadline passed or client gone
        # CPU seconds the worker thread spent inside the encoder (padding, the forward and
        # copying the vectors back): on a GPU what launching the work costs the host, on a CPU
        # the forward itself (this thread's share). Subtracted from the process's CPU, it
        # leaves the host path (bench/bench_host_path.py); exported as a counter.
        self.forward_cpu_s = 0.0
        # The worker's own: the requests in rotation, the round counter, tenants' virtual time,
        # the last round each tenant had a live request in (who is around: plan.round_budget).
        self._active: list[Request] = []
        self._round = 0
        self._vtime: dict[str, float] = {}
        self._last_live: dict[str, int] = {}
        self._holders: dict[int, list[Request]] = {}  # id(job) -> active requests holding it

    @property
    def pending(self) -> int:
        return self._pending

    def pending_of(self, tenant: str) -> int:
        """Requests of `tenant` waiting or running."""
        return self._by_tenant.get(tenant, 0)

    @property
    def preparing(self) -> int:
        return self._preparing

    @property
    def budget(self) -> RoundBudget:
        """What bounds a round, as the policy reads it."""
        return RoundBudget(Budget(self.round_tokens, self.max_round_pieces), self.slice_tokens)

    # -- the event-loop side ------------------------------------------------------------------
    async def submit(
        self, texts: Sequence[str], *, tenant: Tenant | str | None = None
    ) -> np.ndarray:
        """Vectors for `texts` ([N, D]), computed fairly alongside whatever else is queued.
        `tenant`: whose request (default: the caller's, reweighter.tenancy.current); tenants
        share the encoder by weight, and each is bounded by its `max_queued`."""
        who = current() if tenant is None else tenant
        if isinstance(who, str):
            who = Tenant(name=who)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[np.ndarray] = loop.create_future()
        with self._cond:
            req, new = self._register(list(texts), fut, loop, who)
        # A caller that goes away stops asking (its texts still finish if others share them).
        fut.add_done_callback(lambda f: self._finish_request(req) if f.cancelled() else None)
        if not req.jobs:
            self._finish_request(req)
        if new:
            # Tokenising a huge text takes a while: off the loop and off the model's thread.
            # The helper thread posts the pieces itself, and runs even if this caller goes away
            # first, so no request that shares these texts waits for pieces that never come.
            self._split(new)
        try:
            return await fut
        except asyncio.CancelledError:
            fut.cancel()
            raise

    def _register(
        self,
        texts: list[str],
        fut: asyncio.Future[np.ndarray],
        loop: asyncio.AbstractEventLoop,
        who: Tenant,
    ) -> tuple[Request, list[Job]]:
        """Under `_cond`: dedupe against texts in flight, count, post to the worker."""
        if self._closing:
            raise NotReady("the embedder is shutting down")
        if self._pending >= self.max_queue:
            raise Overloaded(
                f"embedding queue is full ({self.max_queue} requests waiting or running)"
            )
        mine = self._by_tenant.get(who.name, 0)
        if who.max_queued is not None and mine >= who.max_queued:
            raise Overloaded(
                f"tenant {who.name!r} is at its max_queued bound ({who.max_queued} requests "
                "waiting or running); other tenants are unaffected",
                field="max_queued",
            )
        jobs: list[Job] = []
        new: list[Job] = []
        slot: dict[str, int] = {}
        index = []
        for t in texts:
            if t not in slot:
                job = self._inflight.get(t)
                if job is None:
                    job = self._inflight[t] = Job(t)
                    new.append(job)
                slot[t] = len(jobs)
                jobs.append(job)
            index.append(slot[t])
        self._seq += 1
        req = Request(jobs, index, fut, loop, open_jobs=len(jobs), seq=self._seq)
        req.timings = current_timings()
        req.tenant, req.weight, req.deadline = who.name, who.weight, current_deadline()
        self._by_tenant[who.name] = mine + 1
        for job in jobs:
            job.waiters.append(req)
        self._pending += 1
        self._preparing += len(new)
        self._post(NewRequest(req))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        return req, new

    def _post(self, message: Message) -> None:
        """Under `_cond`: a message for the worker."""
        self._inbox.append(message)
        self._cond.notify_all()

    def _split(self, jobs: list[Job]) -> None:
        """Hand `jobs` to a tokenising lane (`SplitLanes`); they fail if none takes them."""
        try:
            done = self._lanes.submit(self._prepare, jobs)
        except RuntimeError as exc:  # the lanes were shut down meanwhile (closing)
            for job in jobs:
                self._unprepared(job, NotReady(f"the embedder is shutting down ({exc})"))
            return
        done.add_done_callback(_log_failure)

    def _prepare(self, jobs: list[Job]) -> None:
        """The helper thread: split, then post each text's pieces (or fail just that text)."""
        try:
            pieces = self.stage.split([j.text for j in jobs])
        except Exception:
            for job in jobs:  # find the culprit: only its callers see the error
                try:
                    self._ready(job, self.stage.split([job.text]))
                except Exception as exc:
                    self._unprepared(job, exc)
            return
        per_job: list[list[Piece]] = [[] for _ in jobs]
        for p in pieces:
            per_job[p.text].append(p)
        # One hand-over for the request's texts: the worker never plans a round on part of a
        # request (it would take the part as all there is, tail rule included, and the next
        # round the rest: rounds would depend on when it woke)
        ready = [(job, own) for job, own in zip(jobs, per_job, strict=True) if own]
        with self._cond:
            self._preparing -= len(ready)
            self._inbox.extend(Split(job, own) for job, own in ready)
            self._cond.notify_all()
        for job, own in zip(jobs, per_job, strict=True):
            if not own:
                self._unprepared(job, RuntimeError("the encoder split a text into no pieces"))

    def _ready(self, job: Job, pieces: list[Piece]) -> None:
        with self._cond:
            self._preparing -= 1
            self._post(Split(job, pieces))

    def _unprepared(self, job: Job, exc: BaseException) -> None:
        # Safe off the worker: a job without pieces is never in a round.
        with self._cond:
            self._preparing -= 1
        self._fail(job, exc)

    # -- the worker side ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                round_ = self._next_round()
            except Exception as exc:  # a bug in planning: answer everyone, never leave a hang
                log.exception("planning an embedding round failed unexpectedly")
                for req in self._active:
                    self._finish_request(req, exc)
                continue
            if round_ is None:
                return
            try:
                self._serve(round_)
            except BaseException as exc:  # never let the worker die with callers waiting
                log.exception("embedding round failed unexpectedly")
                for s in round_:
                    for r in s.ranges:
                        self._fail(r.job, exc)

    def _next_round(self) -> Round | None:
        """Read the inbox, plan (no lock held), apply; wait while there is nothing to plan.
        None once closing and nothing is left."""
        while True:
            with self._cond:
                messages, self._inbox = self._inbox, []
            for m in messages:
                self._apply(m)
            self._drop_unwanted()
            gone = [r for r in self._active if not r.live]
            if gone:  # drop finished requests (and their hold on their texts)
                self._retire(gone)
                self._active = [r for r in self._active if r.live]
            shares = self._shares()
            budget = self._round_budget()
            planned = (
                plan(self._active, budget) if shares is None else plan(self._active, budget, shares)
            )
            round_ = cast(Round, planned)
            if round_:
                self._start(round_)
                return round_
            with self._cond:
                while not self._inbox:
                    if self._closing and not any(r.live for r in self._active):
                        return None
                    self._cond.wait()

    def _retire(self, gone: list[Request]) -> None:
        """Requests leaving the rotation no longer hold their texts (for the indices)."""
        for req in gone:
            for job in req.jobs:
                holders = self._holders.get(id(job))
                if holders is not None and req in holders:
                    holders.remove(req)
                    if not holders:
                        del self._holders[id(job)]

    def _drop_unwanted(self) -> None:
        """Requests whose deadline passed or whose client went away are answered with
        DeadlineExceeded before anything more of them is computed, and counted."""
        now = 0.0
        for r in self._active:
            if r.deadline is None or not r.live:
                continue
            now = now or time.monotonic()
            why = r.deadline.passed(now)
            if why is not None:
                self.dropped += 1
                self._finish_request(r, DeadlineExceeded(f"dropped: {why}"))

    def _round_budget(self) -> RoundBudget:
        """The next round's bound: smaller while several tenants are around (plan.round_budget),
        so that a light job's request waits for a smaller round in progress."""
        upcoming = self._round + 1
        for r in self._active:
            self._last_live[r.tenant] = upcoming
        for t in [t for t, last in self._last_live.items() if upcoming - last > LINGER_ROUNDS]:
            del self._last_live[t]
        return round_budget(self.budget, tenants_around(self._last_live, upcoming))

    def _shares(self) -> dict[str, float] | None:
        """Active tenants' virtual times (tokens served / weight), for the policy; None with one
        tenant. A tenant that was idle starts just below the least of the active ones'."""
        tenants = {r.tenant for r in self._active}
        if len(tenants) < 2:
            self._vtime = {}
            return None
        for t in [t for t in self._vtime if t not in tenants]:
            del self._vtime[t]
        fresh = [t for t in tenants if t not in self._vtime]
        if fresh:
            # a tenant that just became active goes first among equals (as a new request does
            # within a tenant): its small request anchors the very next round
            served = {r.tenant for r in self._active if r.turn >= 0}
            floor = min(self._vtime.values(), default=0.0)
            for t in fresh:
                self._vtime[t] = floor if t in served else floor - 1e-9
        return self._vtime

    def _apply(self, m: Message) -> None:
        if isinstance(m, NewRequest):
            req = m.request
            ix = req.length_index = LengthIndex(req.jobs)  # its texts already split: in it
            ix.shared = set()
            for job in req.jobs:
                holders = self._holders.setdefault(id(job), [])
                holders.append(req)
                if len(holders) > 1:  # a text in flight for several requests (plan.index.Views)
                    for holder in holders:
                        holder.length_index.shared.add(id(job))  # type: ignore[union-attr]
            self._active.append(req)
        elif isinstance(m, Split):
            if not m.job.finished:
                m.job.pieces = m.pieces
                m.job.vecs = np.empty((len(m.pieces), self.encoder.dim), dtype=np.float32)
                for req in self._holders.get(id(m.job), ()):
                    req.length_index.add(m.job)  # type: ignore[union-attr]
        elif not m.job.waiters and not m.job.finished:  # Abandon, and nobody came back
            m.job.error = NotReady("abandoned: every caller went away")

    def _start(self, round_: Round) -> None:
        """The round is taken: advance its texts' cursors, mark its requests served."""
        self._round += 1
        for s in round_:
            req = s.request
            if self._vtime:  # several tenants: charge the tokens to its tenant's virtual time
                tokens = sum(p.tokens for p in self._pieces(s.ranges))
                self._vtime[req.tenant] = self._vtime.get(req.tenant, 0.0) + tokens / req.weight
            for r in s.ranges:
                was, r.job.scheduled = r.job.scheduled, r.end
                for holder in self._holders.get(id(r.job), ()):
                    holder.length_index.moved(r.job, was)  # type: ignore[union-attr]
            if req.turn == -1 and req.timings is not None:
                req.timings.queue_s = time.perf_counter() - req.submitted
            req.turn = self._round

    def _embed(self, pieces: list[Piece]) -> np.ndarray:
        with self._model_lock:
            t0 = time.thread_time()
            try:
                out = self.encoder.embed_pieces(pieces)
            finally:
                self.forward_cpu_s += time.thread_time() - t0
        if out.shape[0] != len(pieces):
            raise RuntimeError(f"encoder returned {out.shape[0]} vectors for {len(pieces)} pieces")
        return out

    @staticmethod
    def _pieces(ranges: Sequence[Range[Job]]) -> list[Piece]:
        return [p for r in ranges for p in r.job.pieces[r.start : r.end]]  # type: ignore[index]

    def _serve(self, round_: Round) -> None:
        every = [r for s in round_ for r in s.ranges]
        try:
            vecs = self._embed(self._pieces(every))
        except Exception as merged_exc:
            if len(round_) == 1:
                for r in every:
                    self._fail(r.job, merged_exc)
                return
            # Find who caused it: rerun each request's slice alone, so only its callers fail.
            log.warning("merged embedding batch failed (%s); retrying per request", merged_exc)
            for s in round_:
                try:
                    self._store(s.ranges, self._embed(self._pieces(s.ranges)))
                except Exception as exc:
                    for r in s.ranges:
                        self._fail(r.job, exc)
            return
        self._store(every, vecs)

    def _store(self, ranges: Sequence[Range[Job]], vecs: np.ndarray) -> None:
        at = 0
        finished: list[Job] = []
        for r in ranges:
            job, n = r.job, r.end - r.start
            if job.finished or job.vecs is None or job.pieces is None:
                at += n  # abandoned meanwhile (its callers failed or went away)
                continue
            job.vecs[r.start : r.end] = vecs[at : at + n]
            at += n
            job.done += n
            if job.done == len(job.pieces):
                job.result = self.stage.pool(job.pieces, job.vecs)
                job.vecs = None
                finished.append(job)
        if not finished:
            return
        if self._on_computed is not None:
            try:
                done = np.stack([j.result for j in finished])  # type: ignore[misc]
                self._on_computed([j.text for j in finished], done)
            except Exception:  # bookkeeping must never fail a request
                log.exception("on_computed hook failed")
        for job in finished:
            self._complete(job)

    # -- answers (any thread) -----------------------------------------------------------------
    def _fail(self, job: Job, exc: BaseException) -> None:
        with self._cond:
            if job.finished:
                return
            job.error = exc
        self._complete(job)

    def _complete(self, job: Job) -> None:
        ready: list[Request] = []
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

    def _finish_request(self, req: Request, dropped: BaseException | None = None) -> None:
        """Resolve once: all its texts done, one failed, its caller went away, or `dropped`
        (its deadline passed: answered with that error)."""
        with self._cond:
            if req.resolved:
                return
            req.resolved = True
            self._pending -= 1
            if dropped is None and req.future.cancelled() and req.turn == -1:
                self.dropped += 1  # its caller went away (a gRPC deadline) before any compute
            left = self._by_tenant.get(req.tenant, 1) - 1
            if left:
                self._by_tenant[req.tenant] = left
            else:
                self._by_tenant.pop(req.tenant, None)
            error = dropped or next((j.error for j in req.jobs if j.error is not None), None)
            value = None
            if error is None and all(j.result is not None for j in req.jobs):
                value = (
                    np.stack([req.jobs[i].result for i in req.index])  # type: ignore[misc]
                    if req.index
                    else np.zeros((0, self.encoder.dim), dtype=np.float32)
                )
            # Stop working on texts nobody else is waiting for (the worker drops them).
            for job in req.jobs:
                if req in job.waiters:
                    job.waiters.remove(req)
                if not job.waiters and not job.finished:
                    if self._inflight.get(job.text) is job:
                        del self._inflight[job.text]
                    self._post(Abandon(job))
            self._cond.notify_all()
        if error is not None or value is not None:
            req.deliver(value, error)

    async def aclose(self) -> None:
        """Refuse new work, finish what is queued or running, stop the thread."""
        thread = self._closed()
        if thread is not None:
            await asyncio.to_thread(thread.join)
        self._lanes.shutdown()

    def close(self) -> None:
        thread = self._closed()
        if thread is not None:
            thread.join()
        self._lanes.shutdown()

    def _closed(self) -> threading.Thread | None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            return self._thread


def _log_failure(done: Future[None]) -> None:
    """A tokenising helper that raised past its own handling (a bug): logged, never silent."""
    if not done.cancelled() and (exc := done.exception()) is not None:
        log.error("tokenising helper failed unexpectedly", exc_info=exc)
