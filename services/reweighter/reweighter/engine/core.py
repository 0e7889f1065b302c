"""ReweightEngine: check, embed (dedupe, cache, batch), reweight, compute advantages.

This is the only place the service's rules live. HTTP, gRPC, the CLI and the in-process TRL
integration all call it; a transport converts its wire format to `reweighter.types` and back.
The request checks are in engine/checks.py, the batched math and result assembly in
engine/compute.py; this module is the lifecycle and the public calls.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import torch

from .. import __version__
from ..config import Settings
from ..embedding.base import Embedder
from ..errors import NotReady
from ..limits import Limits
from ..memory import AnswerMemory, build_memory
from ..methods import CATALOG
from ..methods.estimators import estimator_names
from ..tenancy import scoped
from ..timings import current as current_timings
from ..types import (
    EmbedResult,
    EngineInfo,
    ReweightRequest,
    ReweightResult,
)
from .board import DiversityBoard
from .checks import Checked, check_request, check_texts
from .compute import reweight_checked
from .telemetry import GroupTelemetry

# Requests up to this many completions run their tensor math on the event loop: it takes well
# under a millisecond, less than a thread hop. Larger ones go to a worker thread.
_INLINE_MATH_LIMIT = 256


class ReweightEngine:
    """Groups of (completions | embeddings, rewards) in, reweighted rewards and statistics out."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        method_device: str | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.limits = Limits.from_settings(self.settings)
        self._embedder = embedder
        self._load_lock = threading.Lock()
        # The method math runs where the encoder does unless told otherwise: on a GPU host the
        # similarity bmm and the MMR loop then never leave the device.
        method_device = method_device or self.settings.device
        if method_device == "auto":
            method_device = "cuda" if torch.cuda.is_available() else "cpu"
        self.method_device = torch.device(method_device)
        self._memory: AnswerMemory | None = None
        self.telemetry = GroupTelemetry()
        self.board = DiversityBoard(self.settings.dashboard_steps)
        self._memory_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def load(self) -> None:
        """Build the embedder (loads the model). Idempotent and thread-safe."""
        if self._embedder is not None:
            return
        with self._load_lock:
            if self._embedder is None:
                from ..embedding import build_embedder

                self._embedder = build_embedder(self.settings)

    @property
    def ready(self) -> bool:
        return self._embedder is not None

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder

    def _require_embedder(self, *, lazy: bool) -> Embedder:
        if self._embedder is None:
            if not lazy:
                raise NotReady("the embedding model is still loading; retry shortly")
            self.load()
        assert self._embedder is not None
        return self._embedder

    @property
    def memory(self) -> AnswerMemory:
        """The answer memory across steps (outcome_ucb), built on first use from the settings:
        Redis when REDIS_URL is set, else in process."""
        if self._memory is None:
            with self._memory_lock:
                if self._memory is None:
                    self._memory = build_memory(self.settings)
        return self._memory

    @property
    def memory_built(self) -> AnswerMemory | None:
        return self._memory

    async def aclose(self) -> None:
        if self._embedder is not None:
            await self._embedder.aclose()
        if self._memory is not None:
            self._memory.close()

    def close(self) -> None:
        if self._embedder is not None:
            self._embedder.close()
        if self._memory is not None:
            self._memory.close()

    # -- public API ------------------------------------------------------------------------

    def reweight(self, request: ReweightRequest) -> ReweightResult:
        """Synchronous path (CLI, in-process trainer): loads the model on first use."""
        started = time.perf_counter()
        checked = check_request(request, self.limits)
        texts = checked.flat_texts()
        flat = self._require_embedder(lazy=True).encode(texts) if texts else None
        return self._finish(checked, checked.split(flat), self._counts(checked), started)

    async def areweight(self, request: ReweightRequest) -> ReweightResult:
        """Async path for the transports: embedding goes through the dynamic batcher."""
        started = time.perf_counter()
        checked = check_request(request, self.limits)
        texts = checked.flat_texts()
        flat = await self._aencode(texts) if texts else None
        vectors = checked.split(flat)
        counts = (
            await asyncio.to_thread(self._counts, checked) if "memory" in checked.needs else None
        )
        if sum(len(r) for r in checked.rewards) <= _INLINE_MATH_LIMIT:
            return self._finish(checked, vectors, counts, started)
        return await asyncio.to_thread(self._finish, checked, vectors, counts, started)

    def embed(self, texts: Sequence[str]) -> EmbedResult:
        check_texts(texts, self.limits)
        embedder = self._require_embedder(lazy=True)
        return EmbedResult(embedder.model_id, embedder.dim, embedder.encode(list(texts)))

    async def aembed(self, texts: Sequence[str]) -> EmbedResult:
        check_texts(texts, self.limits)
        embedder = self._require_embedder(lazy=False)
        return EmbedResult(embedder.model_id, embedder.dim, await self._aencode(list(texts)))

    async def _aencode(self, texts: list[str]) -> np.ndarray:
        """The async path's one call into the embedder, timed for the request's metrics."""
        embedder = self._require_embedder(lazy=False)
        timings = current_timings()
        start = time.perf_counter()
        try:
            return await embedder.aencode(texts)
        finally:
            if timings is not None:
                timings.encode_s = time.perf_counter() - start

    def validate(self, request: ReweightRequest) -> None:
        """Raise InvalidInput / LimitExceeded exactly as reweight would, without doing any work."""
        check_request(request, self.limits)

    def info(self) -> EngineInfo:
        emb = self._embedder
        return {
            "version": __version__,
            "model": emb.model_id if emb else None,
            "dim": emb.dim if emb else None,
            "device": emb.device if emb else None,
            "precision": emb.precision if emb else None,
            "ready": emb is not None,
            "long_text": str(self.settings.long_text),
            "methods": {
                str(name): {
                    "description": spec.description,
                    "params": spec.params_model.model_json_schema(by_alias=True),
                }
                for name, spec in CATALOG.items()
            },
            "advantages": estimator_names(),
            "limits": self.limits.as_dict(),
        }

    # -- work ------------------------------------------------------------------------------

    def _counts(self, checked: Checked) -> list[list[int]] | None:
        """outcome_ucb's earlier counts per item (-1 for a null answer), recording this step.

        Runs after the request was judged and embedded, so a request refused for its input
        never counts; one that fails later (an overflow) has counted, like a retried call."""
        if "memory" not in checked.needs:
            return None
        assert checked.step is not None
        items = []
        for key, answers in zip(checked.prompt_keys, checked.answers, strict=True):
            assert key is not None and answers is not None
            # each tenant's prompt keys are its own (reweighter.tenancy): a job training on
            # another's prompts never sees its answer counts
            items.append((scoped(key), checked.step, [a for a in answers if a is not None]))
        seen = self.memory.observe_many(items)
        return [
            [-1 if a is None else seen_g[a] for a in answers or []]
            for answers, seen_g in zip(checked.answers, seen, strict=True)
        ]

    def _finish(
        self,
        checked: Checked,
        vectors: list[np.ndarray],
        counts: list[list[int]] | None = None,
        started: float | None = None,
    ) -> ReweightResult:
        uses_model = any(t is not None for t in checked.texts)
        model = self._embedder.model_id if uses_model and self._embedder else None
        result = reweight_checked(checked, vectors, self.method_device, model, counts)
        self.telemetry.record(result)
        if started is not None:  # the dashboard's per-job, per-step figures (engine/board.py)
            self.board.record(checked.step, result, time.perf_counter() - started)
        return result
