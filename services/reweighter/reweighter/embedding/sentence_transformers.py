"""The sentence-transformers encoder: a tokenizer stage and a backend, joined by a token budget.

Why not `SentenceTransformer.encode`: it tokenises per fixed-size batch, truncates silently at the
window, and pads every batch of 32 to its longest member. Here each text is tokenised once, long
texts become windows (policy), and windows are packed into batches by a token budget (padded
length x count), longest first, as text-embeddings-inference does; the modules of the loaded
model (transformer, pooling, normalisation) still run unchanged, so any sentence-transformers
model works and short texts get exactly the vectors plain `encode` gives.

Who does what (stages, not one class): `TokenizerStage` (reweighter.embedding.tokenizer) turns
texts into pieces of ids and pools pieces back, and holds no model; a `Backend`
(reweighter.embedding.backends: eager torch, AOTInductor, ONNX int8) runs the model on a padded
batch of ids and owns the device and the precision. This class joins them: `embed_pieces` cuts
pieces into passes by its `Budget` and runs each through the backend. The batcher splits and
pools with `stage` and runs the model through `embed_pieces`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from reweighter.embedding import ascii_ids
from reweighter.embedding.backends import Backend, BackendSettings, load_weights, select_backend
from reweighter.embedding.backends.base import (
    BUNDLED_MODEL_ID,
    PRECISIONS,
    CompileMode,
    Precision,
    auto_compiles,
    cpu_flags,
    cpu_has_native_bf16,
    resolve_device,
    resolve_precision,
)
from reweighter.embedding.base import Budget, Encoder, Piece
from reweighter.embedding.tokenizer import (
    POLICIES,
    TokenizerSettings,
    TokenizerStage,
    spread_windows,
)
from reweighter.types import DEFAULT_LONG_TEXT, SPREAD_WINDOWS, LongTextPolicy

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

# Where the rest of the package and its tools have always found them (the backends own them).
__all__ = [
    "BUNDLED_MODEL_ID",
    "POLICIES",
    "PRECISIONS",
    "CompileMode",
    "Precision",
    "SentenceTransformerEncoder",
    "auto_compiles",
    "cpu_flags",
    "cpu_has_native_bf16",
    "default_budget",
    "resolve_device",
    "resolve_precision",
    "spread_windows",
]

# Measured on a 2-core CPU (bench/bench_embed.py): activations of ~2k tokens stay in cache, so
# small batches win there; a GPU wants large batches to fill its cores.
CPU_BATCH_TOKENS = 2048
CUDA_BATCH_TOKENS = 16384
DEFAULT_BATCH_SIZE = 64


def default_budget(
    device: str, max_batch_tokens: int | None = None, max_batch_size: int | None = None
) -> Budget:
    """The bound of one forward pass: what the operator set, else the device's default."""
    default_tokens = CUDA_BATCH_TOKENS if device.startswith("cuda") else CPU_BATCH_TOKENS
    return Budget(max_batch_tokens or default_tokens, max_batch_size or DEFAULT_BATCH_SIZE)


class SentenceTransformerEncoder(Encoder):
    """Any sentence-transformers model: `stage` (texts <-> pieces), `backend` (the model), and
    `budget` (the bound of one forward pass; default: the backend's device's).

    `on_batch` (settable) is called with the number of sequences of every forward pass, so the
    embedder can export batch sizes without this class knowing about metrics.
    """

    def __init__(self, stage: TokenizerStage, backend: Backend, budget: Budget | None = None):
        self._stage = stage
        self.backend = backend
        self.model_id, self.dim, self.device = backend.model_id, backend.dim, backend.device
        self.precision = backend.precision
        self.budget = budget or default_budget(backend.device)
        self.on_batch: Callable[[int], None] | None = None

    @classmethod
    def build(
        cls,
        backend: BackendSettings = BackendSettings(),  # noqa: B008 - frozen
        tokenizer: TokenizerSettings = TokenizerSettings(),  # noqa: B008 - frozen
        *,
        max_batch_tokens: int | None = None,
        max_batch_size: int | None = None,
    ) -> SentenceTransformerEncoder:
        """Load the weights once; the stage takes the model's tokenizer and window from them, the
        runtime the settings name wraps them (reweighter.embedding.backends.select_backend)."""
        eager = load_weights(backend)
        stage = TokenizerStage(
            eager.tokenizer,
            tokenizer,
            positions=eager.positions,
            model_window=eager.max_seq_length,
            normalised=eager.normalises,
        )
        runtime = select_backend(eager, backend, stage.window)
        return cls(stage, runtime, default_budget(eager.device, max_batch_tokens, max_batch_size))

    @classmethod
    def load(
        cls,
        model: str | None = None,
        *,
        device: str = "auto",
        long_text: LongTextPolicy = DEFAULT_LONG_TEXT,
        max_seq_length: int | None = None,
        max_batch_tokens: int | None = None,
        max_batch_size: int | None = None,
        compile: bool | CompileMode = False,
        precision: Precision = "auto",
        precision_cache_dir: str | None = None,
        long_text_windows: int = SPREAD_WINDOWS,
        compile_cache_dir: str | None = None,
        word_cache: int = ascii_ids.WORD_CACHE_WORDS,
    ) -> SentenceTransformerEncoder:
        """The flags in one call (for scripts, benches and tests; the service builds from its
        Settings through `build`): each goes to the stage that needs it."""
        tok = TokenizerSettings(long_text, long_text_windows, max_seq_length, word_cache)
        run = BackendSettings(
            model, device, precision, compile, precision_cache_dir, compile_cache_dir
        )
        return cls.build(run, tok, max_batch_tokens=max_batch_tokens, max_batch_size=max_batch_size)

    @property
    def stage(self) -> TokenizerStage:
        return self._stage

    def with_long_text(self, long_text: LongTextPolicy) -> SentenceTransformerEncoder:
        """A view of the same backend under another policy (no second copy of the weights)."""
        return SentenceTransformerEncoder(self._stage.with_long_text(long_text), self.backend,
                                          self.budget)  # fmt: skip

    @property
    def model(self) -> SentenceTransformer:
        """The loaded sentence-transformers model (the eager backend's, whatever the runtime)."""
        return getattr(self.backend, "eager", self.backend).model  # type: ignore[attr-defined]

    @property
    def window(self) -> int:
        return self._stage.window

    @property
    def long_text(self) -> str:
        return self._stage.long_text

    @property
    def long_text_windows(self) -> int:
        return self._stage.long_text_windows

    @property
    def compile_state(self) -> str:
        """off | compiling | compiled | failed (the AOTInductor backend's; off for the others)."""
        return str(getattr(self.backend, "compile_state", "off"))

    @property
    def cache_namespace(self) -> str:
        # The stage's policy and window (changing max_seq_length never serves stale vectors);
        # a precision other than fp32 too (int8 moves similarities by up to ~0.01): replicas of
        # different precisions sharing a Redis never mix vectors; fp32 keys are unchanged.
        key = f"{self.model_id}|{self._stage.namespace}"
        return key if self.precision == "fp32" else f"{key}|{self.precision}"

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self._stage.count_tokens(texts)

    def split(self, texts: Sequence[str]) -> list[Piece]:
        return self._stage.split(texts)

    def pool(self, pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray:
        return self._stage.pool(pieces, vecs)

    def _forward(self, batch: Sequence[Piece], count: bool = True) -> torch.Tensor:
        """One forward pass: the stage pads the pieces' ids, the backend runs them."""
        out = self.backend.forward(*self._stage.padded(batch))
        if count and self.on_batch is not None:
            self.on_batch(len(batch))
        return out

    def embed_pieces(self, pieces: Sequence[Piece]) -> np.ndarray:
        out = np.empty((len(pieces), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for batch in self.budget.batches(pieces):
                vecs = self._forward([pieces[i] for i in batch])
                out[batch] = vecs.cpu().numpy()
        return out

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Synchronous path: all pieces of all texts, token-budgeted batches, pooled per text."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if len(texts) == 0:
            return out
        pieces = self.split(texts)
        vecs = self.embed_pieces(pieces)
        start = 0
        while start < len(pieces):  # pieces come in text order
            end = start + 1
            while end < len(pieces) and pieces[end].text == pieces[start].text:
                end += 1
            out[pieces[start].text] = self.pool(pieces[start:end], vecs[start:end])
            start = end
        return out
