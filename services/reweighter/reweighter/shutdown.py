"""Shutdown within the grace period, whatever the encoder is doing.

`Draining` stands between the transports and the engine. When the grace period is about to end,
`expire()` cancels the engine calls still running and answers each with NotReady (HTTP 503 /
gRPC UNAVAILABLE, both retryable, both in the documented error shape) instead of letting the
server cut the connection or answer 500; the batcher drops the work nobody waits for any more.
`exit_watchdog` is the last resort: if the process has still not exited a few seconds after the
grace period (a thread stuck in native code), it exits anyway.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import threading
from collections.abc import Awaitable
from typing import Any, Generic, TypeVar, cast

from .errors import NotReady

log = logging.getLogger(__name__)
T = TypeVar("T")
E = TypeVar("E")


class Draining(Generic[E]):
    """The engine as the transports see it: every coroutine method of the engine is guarded,
    by construction (a call added to the engine is drained with no edit here); everything else
    is the engine's own. `draining(engine)` gives it the engine's type."""

    def __init__(self, engine: E) -> None:
        self._engine = engine
        self._running: set[asyncio.Task] = set()
        self._expired = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._engine, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        async def drained(*args: Any, **kwargs: Any) -> Any:
            return await self._guard(attr(*args, **kwargs))

        return drained

    def expire(self) -> None:
        """Answer every running call NotReady now, and every later one at once."""
        self._expired = True
        for task in list(self._running):
            task.cancel()

    async def _guard(self, call: Awaitable[T]) -> T:
        if self._expired:
            if asyncio.iscoroutine(call):
                call.close()
            raise _shutting_down()
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            return await call
        except asyncio.CancelledError:
            if not self._expired:
                raise  # the client went away, or the server is cancelling: not ours
            task.uncancel()
            raise _shutting_down() from None
        finally:
            self._running.discard(task)


def draining(engine: E) -> tuple[E, Draining[E]]:
    """The engine behind a drain, typed as the engine (what the transports get), and the drain
    (what the service expires at shutdown): one object, two views."""
    drain = Draining(engine)
    return cast(E, drain), drain


def _shutting_down() -> NotReady:
    return NotReady("the service is shutting down; retry (another replica)", retry_after=1.0)


def exit_now(code: int = 0) -> None:
    """Leave without joining threads (a to_thread or the encoder stuck in native code): every
    request has been answered and the servers are closed; only the flush of the logs is due."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(code)


def exit_watchdog(seconds: float, code: int = 0) -> threading.Timer:
    """Exit the process in `seconds` unless it has exited by itself."""

    def fire() -> None:
        log.error("shutdown still not finished after %.1f s: exiting now", seconds)
        exit_now(code)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer
