"""Dynamic batching: concurrent requests share model passes; the model runs in one worker thread.

Why one thread: the model already uses every core for one batch, so two concurrent forward
passes only fight over caches; and a single consumer can merge whatever queued while it was
busy into one longest-first, token-budgeted pass (the encoder shapes the batches), which is
where the throughput comes from. The event loop only enqueues and awaits a future.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from reweighter.errors import NotReady, Overloaded

log = logging.getLogger(__name__)

Compute = Callable[[list[str]], np.ndarray]


@dataclass
class _Request:
    texts: list[str]
    future: asyncio.Future[np.ndarray]
    loop: asyncio.AbstractEventLoop


def _resolve(fut: asyncio.Future, value: np.ndarray | None, exc: BaseException | None) -> None:
    if fut.done():  # the caller was cancelled (client went away): nothing to deliver
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


class DynamicBatcher:
    """Queue of requests -> one worker thread -> merged `compute` calls -> per-request futures.

    `max_queue` bounds the requests waiting or running; beyond it `submit` raises `Overloaded`
    at once (a 429 the client retries), rather than letting latency grow without bound.
    `max_round_texts` bounds one merged call so a flood does not starve its own first callers.
    `lock` is held around every `compute` so synchronous callers can share the model safely.
    """

    def __init__(
        self,
        compute: Compute,
        *,
        max_queue: int = 1024,
        max_round_texts: int = 4096,
        lock: threading.Lock | None = None,
        name: str = "reweighter-embed",
    ) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        self._compute = compute
        self.max_queue = max_queue
        self.max_round_texts = max_round_texts
        self._lock = lock or threading.Lock()
        self._name = name
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._pending = 0  # queued + running requests
        self._closing = False
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:
        return self._pending

    async def submit(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for `texts` ([N, D]), computed together with whatever else is queued."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[np.ndarray] = loop.create_future()
        with self._cond:
            if self._closing:
                raise NotReady("the embedder is shutting down")
            if self._pending >= self.max_queue:
                raise Overloaded(
                    f"embedding queue is full ({self.max_queue} requests waiting or running)"
                )
            self._pending += 1
            self._queue.append(_Request(list(texts), fut, loop))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return await fut

    def _take(self) -> list[_Request] | None:
        with self._cond:
            while not self._queue:
                if self._closing:
                    return None
                self._cond.wait()
            taken = [self._queue.popleft()]
            n = len(taken[0].texts)
            while self._queue and n + len(self._queue[0].texts) <= self.max_round_texts:
                req = self._queue.popleft()
                n += len(req.texts)
                taken.append(req)
            return taken

    def _run(self) -> None:
        while (round_ := self._take()) is not None:
            try:
                self._serve(round_)
            finally:
                with self._cond:
                    self._pending -= len(round_)

    def _call(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            out = self._compute(texts)
        if out.shape[0] != len(texts):
            raise RuntimeError(f"encoder returned {out.shape[0]} vectors for {len(texts)} texts")
        return out

    def _serve(self, round_: list[_Request]) -> None:
        live = [r for r in round_ if not r.future.cancelled()]
        if not live:
            return
        # Requests of one round may share texts (same prompt sent twice): compute each once.
        index: dict[str, int] = {}
        for r in live:
            for t in r.texts:
                index.setdefault(t, len(index))
        try:
            vecs = self._call(list(index))
        except Exception as merged_exc:
            if len(live) == 1:
                self._deliver(live[0], None, merged_exc)
                return
            # Find who caused it: rerun each request alone, so only its own callers see the error.
            log.warning("merged embedding batch failed (%s); retrying per request", merged_exc)
            for r in live:
                try:
                    self._deliver(r, self._call(r.texts), None)
                except Exception as exc:
                    self._deliver(r, None, exc)
            return
        for r in live:
            self._deliver(r, vecs[[index[t] for t in r.texts]], None)

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
