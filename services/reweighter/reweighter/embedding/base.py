"""The encoder and embedder interfaces the engine depends on."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class Piece:
    """One unit of model work: a whole text, or one window of a long one.

    The batcher schedules pieces, not requests, so that one huge text is split into bounded
    slices that interleave with other requests' work (docs/embedding.md, "Dynamic batching and
    fair slices").
    """

    text: int
    """Index of the text it belongs to, in the list given to `Encoder.split`."""
    tokens: int
    """What it occupies in a batch (its cost against token budgets)."""
    data: Any
    """Encoder-private: the text itself by default, a window's token ids for transformers."""
    weight: float = 1.0
    """Its weight when a text's pieces are pooled into one vector."""


@dataclass(frozen=True)
class Budget:
    """The bound of one padded batch: at most `rows` pieces and `rows` x longest piece at most
    `tokens`. One object for the encoder's forward passes and the batcher's rounds, so the two
    cannot disagree on what fits or on the tail rule."""

    tokens: int
    rows: int

    def fits(self, rows: int, longest: int) -> bool:
        return rows <= self.rows and rows * longest <= self.tokens

    def fits_with_tail(self, rows: int, longest: int) -> bool:
        """What a last batch may reach when it takes a left-over tail: a quarter more tokens.
        Why: a pass of 1-3 left-over pieces costs about a third of a full one (measured on 2
        cores), so the encoder's last batch and the batcher's last round fold such a tail in."""
        return rows <= self.rows and rows * longest <= self.tokens + self.tokens // 4

    def batches(self, pieces: Sequence[Piece]) -> list[list[int]]:
        """The forward passes for `pieces`: indices into them, longest first; a batch grows
        while padded length x count stays within the budget, and a left-over tail joins the
        last full batch (`fits_with_tail`). Here, beside the rule, so that the encoder's
        passes and the tests that count them read one function."""
        order = sorted(range(len(pieces)), key=lambda i: pieces[i].tokens, reverse=True)
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            padded = pieces[current[0]].tokens if current else pieces[i].tokens
            if current and not self.fits(len(current) + 1, padded):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        if len(batches) > 1:
            last, prev = batches[-1], batches[-2]
            if self.fits_with_tail(len(prev) + len(last), pieces[prev[0]].tokens):
                batches[-2:] = [prev + last]
        return batches


class Stage(Protocol):
    """What the batcher tokenises and pools with: texts -> pieces (`split`), and a text's
    pieces and their vectors -> its vector (`pool`). The model is not part of it: the batcher
    runs the model through the encoder (`Encoder.embed_pieces`), so tokenising in the helper
    lanes never touches the object that holds the weights."""

    def split(self, texts: Sequence[str]) -> list[Piece]: ...

    def pool(self, pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray: ...


class Encoder(ABC):
    """Turns texts into L2-normalised float32 vectors, one per text ([N, D] numpy array)."""

    model_id: str
    """Stable identifier of the weights (part of every cache key)."""
    dim: int
    device: str
    budget: Budget = Budget(tokens=16384, rows=64)
    """The bound of one forward pass (padded length x sequences, and sequences); the embedder
    may set it (settings `max_batch_tokens`, `max_batch_size`)."""
    on_batch: Callable[[int], None] | None = None
    """Called with the sequence count of every forward pass (the embedder's batch metrics)."""

    @property
    def cache_namespace(self) -> str:
        """Everything that changes a text's vector besides the text: model and long-text policy."""
        return self.model_id

    @property
    def stage(self) -> Stage:
        """The tokenizer stage the batcher splits and pools with. An encoder of whole texts is
        its own (the defaults below); the transformer encoder's is a `TokenizerStage`
        (reweighter.embedding.tokenizer), an object apart from its backend."""
        return self

    @property
    def max_batch_tokens(self) -> int:
        """`budget.tokens`, under the setting's name."""
        return self.budget.tokens

    @max_batch_tokens.setter
    def max_batch_tokens(self, tokens: int) -> None:
        self.budget = replace(self.budget, tokens=tokens)

    @property
    def max_batch_size(self) -> int:
        """`budget.rows`, under the setting's name."""
        return self.budget.rows

    @max_batch_size.setter
    def max_batch_size(self, rows: int) -> None:
        self.budget = replace(self.budget, rows=rows)

    @abstractmethod
    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text will occupy in a batch (for token-budget batching)."""
        return [max(1, len(t) // 4) for t in texts]

    # -- sliced work (the batcher's path): split -> embed_pieces (any grouping) -> pool ----------
    def split(self, texts: Sequence[str]) -> list[Piece]:
        """The pieces of work for `texts`, in text order. Default: one piece per text."""
        counts = self.count_tokens(texts)
        return [Piece(i, n, t) for i, (t, n) in enumerate(zip(texts, counts, strict=True))]

    def embed_pieces(self, pieces: Sequence[Piece]) -> np.ndarray:
        """One vector per piece ([P, D] float32), for any subset of any texts' pieces."""
        return self.encode([p.data for p in pieces])

    def pool(self, pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray:
        """One text's pieces and their vectors -> its vector: the weighted mean, re-normalised
        when there was more than one piece (a single piece keeps its vector exactly)."""
        return vecs[0] if len(pieces) == 1 else weighted_mean(pieces, vecs)


def weighted_mean(pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray:
    """Several pieces' vectors -> one: the mean weighted by `Piece.weight`, re-normalised."""
    w = np.asarray([p.weight for p in pieces], dtype=np.float64)
    v = (vecs.astype(np.float64) * w[:, None]).sum(0) / w.sum()
    return (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)


@dataclass
class EmbedStats:
    """Plain counters the service exports to Prometheus (no global registry in the library)."""

    cache_hits: int = 0
    cache_misses: int = 0
    redis_errors: int = 0
    dedupe_saved: int = 0
    texts_encoded: int = 0
    batches: int = 0
    batch_sizes: list[int] | None = None  # recent batch sizes, drained by the metrics exporter
    tenant_hits: dict[str, int] | None = None  # cache hits per tenant other than "default"


class Embedder(ABC):
    """What the engine calls: an encoder behind dedupe, a cache and (async path) dynamic batching.

    `encode` serves synchronous callers (CLI, in-process TRL); `aencode` serves the async
    transports and must never block the event loop (the model runs in a worker thread, and
    concurrent requests are merged into token-budgeted batches).
    """

    model_id: str
    dim: int
    device: str
    precision: str = "fp32"
    """What the encoder computes in (fp32, int8, fp16, bf16): reported by /v1/info."""
    stats: EmbedStats

    @abstractmethod
    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    @abstractmethod
    async def aencode(self, texts: Sequence[str]) -> np.ndarray: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Stop background workers (batcher) and close connections."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Synchronous counterpart of aclose for non-async callers."""
