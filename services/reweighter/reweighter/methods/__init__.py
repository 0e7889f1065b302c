"""The math: the reweighting methods of the catalogue (`catalog.py`: dra, mmr, darling,
outcome_ucb, none) and the advantage estimators, as pure batched torch functions.

No I/O, no globals, no model loading: rewards [G] or [B, G], embeddings [G, D] or [B, G, D] (or
similarities [B, G, G]), an optional boolean mask [B, G] for ragged groups, any device.

Importing this package does not import torch: the catalogue (`catalog.py`) and the parameter
models (`params.py`) are what the wire models need, and a light client has no torch. The
kernels load on first use of their names.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import Any

from reweighter.methods.catalog import CATALOG, MethodSpec, get_method
from reweighter.methods.params import (
    DarlingParams,
    DraParams,
    MmrParams,
    NoneParams,
    OutcomeUcbParams,
    PassAtKParams,
)
from reweighter.types import AdvantageKind, Method

# Public name -> the torch module (in this package) that defines it.
_LAZY = {
    **dict.fromkeys(("ADVANTAGE_KINDS", "advantages", "batched_advantages"), "advantages"),
    **dict.fromkeys(("ESTIMATORS", "EstimatorSpec", "estimator_names", "get_estimator"),
                    "estimators"),  # fmt: skip
    **dict.fromkeys(("dra",), "dra"),
    **dict.fromkeys(("darling",), "darling"),
    **dict.fromkeys(("outcome_ucb",), "outcome_ucb"),
    **dict.fromkeys(("pass_at_k",), "pass_at_k"),
    **dict.fromkeys(
        (
            "answer_labels",
            "class_counts",
            "distinct_answers",
            "effective_size",
            "similarity_classes",
        ),
        "classes",
    ),
    **dict.fromkeys(("mmr",), "mmr"),
    **dict.fromkeys(
        (
            "batched_cosine",
            "batched_mean_similarity",
            "cosine_similarity",
            "mean_pairwise_similarity",
        ),
        "similarity",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # Importing the submodule `dra` sets it as this package's attribute `dra`, which would
        # shadow the function of that name: the public names stay the functions.
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "CATALOG",
    "AdvantageKind",
    "DarlingParams",
    "DraParams",
    "Method",
    "MethodSpec",
    "MmrParams",
    "NoneParams",
    "OutcomeUcbParams",
    "PassAtKParams",
    "get_method",
    *_LAZY,
]
