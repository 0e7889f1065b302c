"""Shared pieces of the embedding tests: the real model loaded once, a counting encoder.

No tests here; a module (not a conftest) so the other embedding test files can import it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence

import numpy as np

from reweighter.embedding.base import Encoder
from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder


@functools.cache
def bundled_encoder() -> SentenceTransformerEncoder:
    """The bundled MiniLM on CPU, loaded once per test session, embedding every window of a
    long text (chunk_mean: the tests of long texts compute it by hand; the default is spread)."""
    return SentenceTransformerEncoder.load(device="cpu", long_text="chunk_mean")


def fresh_view(long_text: str = "chunk_mean") -> SentenceTransformerEncoder:
    """The shared weights under a private copy of the settings, so tests can change budgets."""
    return bundled_encoder().with_long_text(long_text)  # type: ignore[arg-type]


class CountingEncoder(Encoder):
    """The real encoder, recording every call; optionally held at a gate or failing on a marker.

    A thin wrapper, not a mock: every vector still comes from the real model.
    """

    def __init__(
        self,
        inner: Encoder,
        *,
        gate: threading.Event | None = None,
        fail_on: str | None = None,
    ) -> None:
        self.inner = inner
        self.model_id, self.dim, self.device = inner.model_id, inner.dim, inner.device
        self.calls: list[list[str]] = []
        self.gate = gate
        self.fail_on = fail_on
        self.entered = threading.Event()

    @property
    def cache_namespace(self) -> str:
        return self.inner.cache_namespace

    @property
    def on_batch(self) -> Callable[[int], None] | None:  # type: ignore[override]
        return self.inner.on_batch

    @on_batch.setter
    def on_batch(self, fn: Callable[[int], None] | None) -> None:
        self.inner.on_batch = fn

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(30), "test gate never opened"
        if self.fail_on is not None and any(self.fail_on in t for t in texts):
            raise ValueError(f"refusing a text containing {self.fail_on!r}")
        return self.inner.encode(texts)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)
