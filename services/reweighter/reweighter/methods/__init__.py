"""The math: DRA and MMR reweighting and advantage estimators, as pure batched torch functions.

No I/O, no globals, no model loading: rewards [G] or [B, G], embeddings [G, D] or [B, G, D] (or
similarities [B, G, G]), an optional boolean mask [B, G] for ragged groups, any device.
"""

from reweighter.methods.advantages import ADVANTAGE_KINDS, advantages, batched_advantages
from reweighter.methods.dra import dra, dra_from_similarity
from reweighter.methods.mmr import mmr, mmr_from_similarity
from reweighter.methods.registry import (
    METHODS,
    DraParams,
    MethodSpec,
    MmrParams,
    NoneParams,
    get_method,
)
from reweighter.methods.similarity import (
    batched_cosine,
    batched_mean_similarity,
    cosine_similarity,
    mean_pairwise_similarity,
)
from reweighter.types import AdvantageKind, Method

__all__ = [
    "ADVANTAGE_KINDS",
    "METHODS",
    "AdvantageKind",
    "Method",
    "DraParams",
    "MethodSpec",
    "MmrParams",
    "NoneParams",
    "advantages",
    "batched_advantages",
    "batched_cosine",
    "batched_mean_similarity",
    "cosine_similarity",
    "dra",
    "dra_from_similarity",
    "get_method",
    "mean_pairwise_similarity",
    "mmr",
    "mmr_from_similarity",
]
