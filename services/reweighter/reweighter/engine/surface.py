"""The engine's surface: the one declaration of what every caller of the engine may use.

The transports (api/), the service, the drain (shutdown.Draining), the assembler and the
in-process client are typed against `EngineSurface`, not the concrete `ReweightEngine`, so a
test or another engine can stand in without subclassing. A call added to the engine is added
here once; the drain wraps every coroutine of the engine by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ..types import EmbedResult, EngineInfo, ReweightRequest, ReweightResult

if TYPE_CHECKING:
    from ..config import Settings
    from ..embedding.base import Embedder
    from .board import DiversityBoard


class EngineSurface(Protocol):
    settings: Settings
    board: DiversityBoard
    """Per job and step, the diversity figures the dashboard plots (engine/board.py)."""

    @property
    def ready(self) -> bool:
        """The model is loaded: requests with texts can be served."""
        ...

    @property
    def embedder(self) -> Embedder | None: ...

    def load(self) -> None: ...

    async def areweight(self, request: ReweightRequest) -> ReweightResult: ...

    async def aembed(self, texts: Sequence[str]) -> EmbedResult: ...

    def info(self) -> EngineInfo: ...

    async def aclose(self) -> None: ...
