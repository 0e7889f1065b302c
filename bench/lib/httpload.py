"""Persistent keep-alive HTTP load for the outside-in benchmarks (shared by bench_first_contact
and bench_peer).

Why: a client created per timed batch charges its own setup (TLS context, pools, TCP connects;
measured ~0.2 s before the first request reached the server, 4 % of a 128-text batch) to the
server; a trainer keeps its client. Each connection is one httpx.AsyncClient on one long-lived
event loop in a daemon thread, opened once and reused; connections a server closed while idle
are reopened by an untimed touch before each timed batch, and connects inside timed batches are
counted (should be 0).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

PER_REQUEST, CONNECTIONS = 16, 8


class Loop:
    """One long-lived event loop in a daemon thread: the clients live on it across rounds."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


class Connections:
    """CONNECTIONS persistent keep-alive connections to one server (a client of one connection
    each), fed from one queue of requests of PER_REQUEST texts."""

    def __init__(self, loop: Loop, url: str, path: str, body: Callable[[list[str]], dict],
                 touch: str) -> None:  # fmt: skip
        import httpx

        self.loop, self.path, self.body, self.touch_path = loop, path, body, touch
        self.timing = False
        self.connects = 0  # TCP connects made inside timed batches
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=None)

        async def make() -> list[httpx.AsyncClient]:
            return [httpx.AsyncClient(base_url=url, timeout=600, limits=limits)
                    for _ in range(CONNECTIONS)]  # fmt: skip

        self.clients = loop.call(make())

    async def _trace(self, name: str, info: dict) -> None:
        if self.timing and name == "connection.connect_tcp.complete":
            self.connects += 1

    async def _touch(self) -> None:
        await asyncio.gather(*(c.get(self.touch_path) for c in self.clients))

    def post(self, texts: list[str]) -> list[Any]:
        """One request of `texts` (untimed: the vector check); the JSON answer."""

        async def run() -> Any:
            r = await self.clients[0].post(self.path, json=self.body(texts))
            r.raise_for_status()
            return r.json()

        return self.loop.call(run())

    def embed(self, texts: list[str], per_request: int = PER_REQUEST) -> float:
        """Seconds to embed `texts` as requests of `per_request` over the CONNECTIONS clients."""

        async def run() -> float:
            await self._touch()  # idle connections the server closed are reopened here, untimed
            queue: asyncio.Queue[list[str]] = asyncio.Queue()
            for i in range(0, len(texts), per_request):
                queue.put_nowait(texts[i : i + per_request])
            ext = {"trace": self._trace}

            async def connection(client) -> None:  # noqa: ANN001 - an httpx.AsyncClient
                while not queue.empty():
                    r = await client.post(self.path, json=self.body(queue.get_nowait()),
                                          extensions=ext)  # fmt: skip
                    r.raise_for_status()

            self.timing = True
            t = time.perf_counter()
            try:
                await asyncio.gather(*(connection(c) for c in self.clients))
                return time.perf_counter() - t
            finally:
                self.timing = False

        return self.loop.call(run())

    def close(self) -> None:
        async def run() -> None:
            await asyncio.gather(*(c.aclose() for c in self.clients))

        self.loop.call(run())
