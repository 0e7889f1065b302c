"""The encoder joins the two stages, and the batcher calls them apart: the tokenizer stage to
split and pool (in its helper lanes and worker), the encoder to run the backend. On the bundled
MiniLM, against the full transformers tokenizer and model (minilm.reference)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from reweighter.embedding.base import Budget, Piece
from reweighter.embedding.embedder import CachingEmbedder
from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder
from reweighter.embedding.tokenizer import TokenizerStage

from .minilm import TEXTS, reference
from .test_backends import eager


@pytest.fixture(scope="module", autouse=True)
def _models() -> None:
    """MiniLM (ours and the reference's) loaded in setup, not inside a timed test call."""
    eager()
    reference(["warm"])


class RecordingStage(TokenizerStage):
    """The real stage, recording the threads that split and how many texts were pooled."""

    def __init__(self, inner: TokenizerStage) -> None:
        self.__dict__.update(vars(inner))
        self.split_threads: list[str] = []
        self.pooled = 0

    def split(self, texts: Sequence[str]) -> list[Piece]:
        self.split_threads.append(threading.current_thread().name)
        return super().split(texts)

    def pool(self, pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray:
        self.pooled += 1
        return super().pool(pieces, vecs)


def test_the_batcher_tokenises_with_the_stage_and_runs_the_backend() -> None:
    e = eager()
    stage = RecordingStage(
        TokenizerStage(e.tokenizer, positions=e.positions, model_window=e.max_seq_length)
    )
    enc = SentenceTransformerEncoder(stage, e)
    emb = CachingEmbedder(enc, None)
    try:
        assert emb.batcher.stage is stage and emb.batcher.encoder is enc
        got = asyncio.run(emb.aencode(TEXTS))
    finally:
        emb.close()
    np.testing.assert_allclose(got, reference(TEXTS), atol=2e-6)
    assert stage.pooled == len(TEXTS)
    assert stage.split_threads and all("split" in t for t in stage.split_threads)  # the lanes
    assert emb.stats.batches >= 1  # the backend ran through the encoder's passes


def test_the_settings_reach_the_stage_that_needs_them() -> None:
    """`load`'s flags, each in its stage: policy, windows and word cache in the tokenizer
    stage; device and precision in the backend; the batch bound in the encoder's budget."""
    enc = SentenceTransformerEncoder.load(device="cpu", compile="off", long_text="tail",
                                          long_text_windows=3, word_cache=0,
                                          max_batch_tokens=999, max_batch_size=7)  # fmt: skip
    stage = enc.stage
    assert (stage.long_text, stage.long_text_windows, stage.word_ids) == ("tail", 3, None)
    assert (enc.backend.device, enc.backend.precision) == ("cpu", "fp32")
    assert enc.budget == Budget(999, 7)
    assert enc.cache_namespace == "sentence-transformers/all-MiniLM-L6-v2|tail|256"
    np.testing.assert_allclose(enc.encode(TEXTS), reference(TEXTS), atol=2e-6)
