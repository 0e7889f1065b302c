"""The ONNX int8 backend: the transformer in ONNX Runtime with weights quantised to int8
(reweighter.embedding.quantize builds and caches the artefact), the model's own pooling and
normalisation after it in torch. CPU only; ~0.01 of similarity moves (BENCHMARKS.md, precision),
which is why the cache namespace names the precision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from reweighter.embedding.backends.eager import EagerBackend


class OnnxInt8Backend:
    """Over `eager` (loaded in fp32 on CPU): its transformer exported and quantised once into
    `cache_dir` (default: quantize.default_cache_dir()), its modules after the transformer
    (pooling, normalisation) reused."""

    runtime = "onnx-int8"
    precision = "int8"

    def __init__(self, eager: EagerBackend, cache_dir: str | Path | None = None) -> None:
        from reweighter.embedding import quantize

        if eager.precision != "fp32" or eager.device != "cpu":
            raise ValueError("int8 is exported from the fp32 model on CPU")
        self.eager = eager
        self.model_id, self.dim, self.device = eager.model_id, eager.dim, eager.device
        cache = Path(cache_dir) if cache_dir else quantize.default_cache_dir()
        path = quantize.build_int8(eager.transformer, eager.type_ids, cache)
        self.ort: Any = quantize.OrtTransformer(path, eager.type_ids)
        """The ONNX Runtime session over the artefact (`ort.path`)."""
        self.tail = [m for _, m in list(eager.model.named_children())[1:]]

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
        features: dict = {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy(mask),
            "token_embeddings": self.ort(ids, mask),
        }
        for module in self.tail:
            features = module(features)
        return features["sentence_embedding"].float()
