"""Per-request timings (TEI-style observability) without threading a parameter through layers.

A transport opens `collecting()` around one request; the engine and the batcher fill in the
`RequestTimings` found in the current context (the request's own asyncio task), and the
transport exports them as histograms when the request ends. Outside `collecting()` nothing is
recorded and nothing costs more than one ContextVar lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class RequestTimings:
    queue_s: float | None = None
    """Seconds the request's texts waited in the batcher before the encoder first served it
    (None: nothing of it was queued, e.g. every text came from the cache)."""
    encode_s: float | None = None
    """Seconds the request spent in the embedder: cache, queue and encoder together."""


_current: ContextVar[RequestTimings | None] = ContextVar("reweighter_timings", default=None)


def current() -> RequestTimings | None:
    """The timings of the request being served in this context, if anyone collects them."""
    return _current.get()


@contextmanager
def collecting() -> Iterator[RequestTimings]:
    timings = RequestTimings()
    token = _current.set(timings)
    try:
        yield timings
    finally:
        _current.reset(token)
