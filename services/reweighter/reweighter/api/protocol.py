"""What the transports need from the engine: a small Protocol, so api/ depends on a contract,
not on ReweightEngine (and a test or another engine can stand in without subclassing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..config import Settings
from ..embedding.base import Embedder
from ..types import EmbedResult, EngineInfo, ReweightRequest, ReweightResult


class EngineProtocol(Protocol):
    settings: Settings

    @property
    def ready(self) -> bool: ...

    @property
    def embedder(self) -> Embedder | None: ...

    def load(self) -> None: ...

    async def areweight(self, request: ReweightRequest) -> ReweightResult: ...

    async def aembed(self, texts: Sequence[str]) -> EmbedResult: ...

    def info(self) -> EngineInfo: ...

    async def aclose(self) -> None: ...
