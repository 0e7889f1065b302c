"""The embedder the engine calls: dedupe, cache, then the encoder (directly, or via the batcher).

Order matters for cost: identical texts inside a call collapse first (a collapsing policy
repeats itself), the cache answers what it has seen, and only the rest reaches the model.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np

from reweighter.embedding.base import Budget, Embedder, EmbedStats, Encoder
from reweighter.embedding.batcher import DynamicBatcher
from reweighter.embedding.cache import EmbeddingCache, cache_key
from reweighter.errors import InvalidInput
from reweighter.tenancy import DEFAULT_TENANT, current_tenant

# The unit of fairness of the DynamicBatcher: a request with at most this many tokens left is
# served whole in the round it anchors, and a round is 4 slices of padded tokens. CPU: a round
# of 2048 tokens is ~0.3 s of MiniLM on 2 cores, so a small request that arrives while a huge
# one encodes waits about one round plus its own work. A GPU does 32k tokens in milliseconds.
CPU_SLICE_TOKENS = 512
CUDA_SLICE_TOKENS = 32768


def default_slice_tokens(device: str) -> int:
    return CUDA_SLICE_TOKENS if str(device).startswith("cuda") else CPU_SLICE_TOKENS


# EmbedStats.batch_sizes is drained by the metrics exporter; without one, keep only the recent.
_MAX_BATCH_HISTORY = 10_000


class CachingEmbedder(Embedder):
    def __init__(
        self,
        encoder: Encoder,
        cache: EmbeddingCache | None = None,
        *,
        max_batch_tokens: int | None = None,
        max_batch_size: int | None = None,
        max_queue: int = 1024,
        slice_tokens: int | None = None,
    ) -> None:
        self.encoder = encoder
        self.cache = cache
        self.model_id, self.dim, self.device = encoder.model_id, encoder.dim, encoder.device
        self.precision = str(getattr(encoder, "precision", "fp32"))
        self.namespace = encoder.cache_namespace
        encoder.budget = Budget(
            encoder.budget.tokens if max_batch_tokens is None else max_batch_tokens,
            encoder.budget.rows if max_batch_size is None else max_batch_size,
        )
        self.stats = EmbedStats(batch_sizes=[])
        self._stats_lock = threading.Lock()
        encoder.on_batch = self._on_batch
        self._model_lock = threading.Lock()
        self.batcher = DynamicBatcher(
            encoder,
            slice_tokens=slice_tokens or default_slice_tokens(encoder.device),
            max_queue=max_queue,
            lock=self._model_lock,
            on_computed=self._computed,
        )

    # -- bookkeeping ------------------------------------------------------------------------
    def _on_batch(self, size: int) -> None:
        with self._stats_lock:
            self.stats.batches += 1
            sizes = self.stats.batch_sizes
            if sizes is None:
                sizes = self.stats.batch_sizes = []
            sizes.append(size)
            if len(sizes) > _MAX_BATCH_HISTORY:
                del sizes[: len(sizes) // 2]

    def _count(self, *, hits: int = 0, misses: int = 0, saved: int = 0, encoded: int = 0) -> None:
        tenant = current_tenant() if hits else DEFAULT_TENANT
        with self._stats_lock:
            self.stats.cache_hits += hits
            if tenant != DEFAULT_TENANT:  # the cache is shared; its hits are counted per tenant
                by = self.stats.tenant_hits = self.stats.tenant_hits or {}
                by[tenant] = by.get(tenant, 0) + hits
            self.stats.cache_misses += misses
            self.stats.dedupe_saved += saved
            self.stats.texts_encoded += encoded
            if self.cache is not None:
                self.stats.redis_errors = self.cache.errors

    # -- the pipeline -----------------------------------------------------------------------
    @staticmethod
    def _unique(texts: Sequence[str]) -> tuple[list[str], list[int]]:
        if isinstance(texts, str | bytes):
            raise InvalidInput("expected a list of strings, got a single string", field="texts")
        index: dict[str, int] = {}
        inverse: list[int] = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidInput(
                    f"expected a string, got {type(t).__name__}", field=f"texts[{i}]"
                )
            inverse.append(index.setdefault(t, len(index)))
        return list(index), inverse

    def _lookup(self, unique: list[str]) -> tuple[list[str], list[np.ndarray | None]]:
        keys = [cache_key(self.namespace, t) for t in unique]
        if self.cache is None:
            return keys, [None] * len(unique)
        found = self.cache.get_many(keys)
        # A vector of the wrong size (another model under a colliding prefix) is a miss.
        return keys, [v if v is not None and v.shape == (self.dim,) else None for v in found]

    def _computed(self, texts: list[str], vecs: np.ndarray) -> None:
        """Runs in the model's thread: write back (so the event loop never waits), count."""
        if self.cache is not None:
            self.cache.set_many(
                {cache_key(self.namespace, t): v for t, v in zip(texts, vecs, strict=True)}
            )
        self._count(encoded=len(texts))

    def _compute(self, texts: list[str]) -> np.ndarray:
        vecs = self.encoder.encode(texts)
        self._computed(texts, vecs)
        return vecs

    def _assemble(
        self,
        n: int,
        found: list[np.ndarray | None],
        missing: list[int],
        new: np.ndarray | None,
        inverse: list[int],
    ) -> np.ndarray:
        rows = list(found)
        if new is not None:
            for j, i in enumerate(missing):
                rows[i] = new[j]
        self._count(hits=len(found) - len(missing), misses=len(missing), saved=n - len(found))
        if not inverse:
            return np.zeros((0, self.dim), dtype=np.float32)
        unique = np.stack(rows).astype(np.float32, copy=False)
        return unique[inverse]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        unique, inverse = self._unique(texts)
        _, found = self._lookup(unique)
        missing = [i for i, v in enumerate(found) if v is None]
        new = None
        if missing:
            with self._model_lock:
                new = self._compute([unique[i] for i in missing])
        return self._assemble(len(inverse), found, missing, new, inverse)

    async def aencode(self, texts: Sequence[str]) -> np.ndarray:
        unique, inverse = self._unique(texts)
        if self.cache is not None and self.cache.blocking:
            _, found = await asyncio.to_thread(self._lookup, unique)
        else:
            _, found = self._lookup(unique)
        missing = [i for i, v in enumerate(found) if v is None]
        new = await self.batcher.submit([unique[i] for i in missing]) if missing else None
        return self._assemble(len(inverse), found, missing, new, inverse)

    async def aclose(self) -> None:
        await self.batcher.aclose()
        if self.cache is not None:
            await asyncio.to_thread(self.cache.close)

    def close(self) -> None:
        self.batcher.close()
        if self.cache is not None:
            self.cache.close()
