"""The in-process client (`inprocess://`): the engine in this process, behind the clients' surface.

The one module of `client` that reaches the engine, and only lazily: nothing here imports torch
or the embedding model until the first call, so `import reweighter.client` stays light. Members
(`submit_member`) go through a GroupAssembler with this process's memory store, on the client's
own loop. Needs the server's dependencies: `pip install 'reweighter[server]'`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..types import (
    EmbedResult,
    EngineInfo,
    MemberResult,
    MemberSubmission,
    ReweightRequest,
    ReweightResult,
)
from ..wire.calls import Call
from ._base import AsyncClientBase
from ._sync import SyncClient
from .retry import RetryPolicy

if TYPE_CHECKING:
    from ..assembly import GroupAssembler
    from ..config import Settings
    from ..engine import ReweightEngine


def _engine_class() -> Any:
    # A light (client-only) install fails here, with the extra to install in the message.
    from ..engine import ReweightEngine

    return ReweightEngine


class AsyncLocalClient(AsyncClientBase):
    """The engine (built on first use from `settings`, a Settings or overrides of the
    environment's, or the one given) and an assembler over it, called directly. `close`
    closes only what this client built."""

    def __init__(
        self,
        engine: ReweightEngine | None = None,
        *,
        settings: Settings | Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy(retries=0)  # nothing between us and the engine
        self._engine = engine
        self._owns_engine = engine is None
        self._settings = settings
        self._assembler: GroupAssembler | None = None

    @property
    def engine(self) -> ReweightEngine:
        if self._engine is None:
            engine_cls = _engine_class()
            settings = self._settings
            if isinstance(settings, Mapping):
                from ..config import Settings

                settings = Settings(**settings)
            self._engine = engine_cls(settings)
        return self._engine

    @property
    def assembler(self) -> GroupAssembler:
        """The GroupAssembler members go through (made on first use)."""
        if self._assembler is None:
            from ..assembly import GroupAssembler, make_store

            settings = self.engine.settings
            self._assembler = GroupAssembler(self.engine, make_store(settings), settings)
        return self._assembler

    async def _loaded(self) -> ReweightEngine:
        engine = self.engine
        if not engine.ready:
            await asyncio.to_thread(engine.load)
        return engine

    async def _answer(self, call: Call, request: Any) -> Any:
        return await getattr(await self._loaded(), call.engine)(request)

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        return await (await self._loaded()).aembed(texts)

    async def info(self) -> EngineInfo:
        return (await self._loaded()).info()

    async def _submit(self, sub: MemberSubmission, deadline: float | None) -> MemberResult:
        await self._loaded()
        return await self.assembler.submit(sub)

    async def close(self) -> None:
        if self._assembler is not None:
            await self._assembler.aclose()
            self._assembler = None
        if self._owns_engine and self._engine is not None:
            await self._engine.aclose()


class LocalClient(SyncClient[AsyncLocalClient]):
    """The synchronous in-process client. `reweight`, `embed` and `info` call the engine's
    synchronous path in the caller's thread (no hop through the private loop); members go
    through the loop, where the assembler lives.

    with LocalClient() as client:          # loads the bundled model on the first call
        result = client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

    async_class = AsyncLocalClient  # takes its arguments

    def reweight(self, request: ReweightRequest) -> ReweightResult:
        return self.aio.engine.reweight(request)

    def embed(self, texts: Sequence[str]) -> EmbedResult:
        return self.aio.engine.embed(texts)

    def info(self) -> EngineInfo:
        engine = self.aio.engine
        engine.load()
        return engine.info()
