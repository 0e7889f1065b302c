"""The sync clients are thin wrappers: the async client runs on a private event loop in a
daemon thread, and each call waits for its result. One implementation per transport, and a
sync client is safe to share between threads (calls are scheduled thread-safely).

`submit_member_async` is the same member call awaited from any other event loop (a stack's
reward worker): it runs on the private loop and hands the answer back, so one client object
serves sync and async callers, whichever loop or thread they are on."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from ..types import EmbedResult, EngineInfo, MemberResult, ReweightRequest, ReweightResult
from ._base import AsyncClientBase, Reweighter

T = TypeVar("T")


A = TypeVar("A", bound=AsyncClientBase)


class SyncClient(Reweighter, Generic[A]):
    """`reweight`, `embed`, `info`, `submit_member`, `close` and a context manager over an async
    client: the `Reweighter` surface, for every transport."""

    async_class: type[A]
    """The async client this class wraps; the constructor takes its arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="reweighter-client", daemon=True
        )
        self._thread.start()

        async def build() -> A:  # grpc.aio and aiohttp want the loop that will use them
            return self.async_class(*args, **kwargs)

        try:
            self.aio: A = self._run(build())
        except BaseException:
            _shutdown(self._loop, None, self._thread)
            raise
        self.retry = self.aio.retry
        # Runs once: on close(), when a dropped client is collected, or at interpreter exit
        # (the loop thread is still alive then), so connections are closed, not leaked.
        self._finalizer = weakref.finalize(self, _shutdown, self._loop, self.aio, self._thread)

    def _run(self, coro: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
        if self._loop.is_closed():
            if asyncio.iscoroutine(coro):
                coro.close()  # never scheduled: no "never awaited" warning
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def reweight(self, request: ReweightRequest) -> ReweightResult:
        return self._run(self.aio.reweight(request))

    def call(self, name: str, request: Any) -> Any:
        """One call of reweighter.wire.calls by name, as the async client's `call`."""
        return self._run(self.aio.call(name, request))

    def embed(self, texts: Sequence[str]) -> EmbedResult:
        return self._run(self.aio.embed(texts))

    def info(self) -> EngineInfo:
        return self._run(self.aio.info())

    def submit_member(self, *args: Any, **kwargs: Any) -> MemberResult:
        """One group member, as the async client's `submit_member` (same arguments)."""
        return self._run(self.aio.submit_member(*args, **kwargs))

    async def submit_member_async(self, *args: Any, **kwargs: Any) -> MemberResult:
        """`submit_member`, awaitable from any event loop; cancelling it cancels the call."""
        if self._loop.is_closed():
            raise RuntimeError("the client is closed")
        coro = self.aio.submit_member(*args, **kwargs)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._finalizer()  # closes the async client, stops and closes the loop

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shutdown(loop: asyncio.AbstractEventLoop, aio: Any, thread: threading.Thread) -> None:
    if loop.is_closed():
        return
    mine = _on(loop)  # collected on the loop's own thread: it cannot wait for itself
    if aio is not None and loop.is_running():
        closing = asyncio.run_coroutine_threadsafe(aio.close(), loop)
        if not mine:
            with contextlib.suppress(Exception):  # best effort; the loop stops regardless
                closing.result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    if not mine:
        thread.join(timeout=10)
        if not loop.is_running():
            loop.close()


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
