"""The method registry: a Method maps to its kernel and the pydantic model of its parameters.

The engine validates a request's `params` with `params_model` and then calls `apply` on whole
batches of groups. `apply` trusts its input (the engine checked it: finite rewards, non-empty
groups, finite similarities from `cosine_similarity`), so nothing is checked twice. `info()`
publishes each model's JSON schema, so clients can discover the methods and their parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.advantages import ADVANTAGE_KINDS
from reweighter.methods.dra import _dra
from reweighter.methods.mmr import _mmr
from reweighter.methods.params import DraParams, MmrParams, NoneParams
from reweighter.types import Method, parse_name

Apply = Callable[
    [torch.Tensor, torch.Tensor | None, torch.Tensor | None, Any],
    tuple[torch.Tensor, torch.Tensor | None],
]


@dataclass(frozen=True)
class MethodSpec:
    """`apply(rewards [B, G], sim [B, G, G] | None, mask [B, G] | None, params)` returns
    (new rewards [B, G], λ per group [B] or None). Inputs are trusted (see the module doc)."""

    name: Method
    params_model: type[BaseModel]
    apply: Apply
    needs_similarity: bool
    description: str


def _need_sim(name: str, sim: torch.Tensor | None) -> torch.Tensor:
    if sim is None:
        raise InvalidInput(f"method {name!r} needs the similarity matrix", field="similarity")
    return sim


def _apply_dra(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: DraParams
) -> tuple[torch.Tensor, None]:
    s = _need_sim("dra", sim)
    b = _checks.trusted(rewards.to(s.device), mask)
    s = s.to(_checks.compute_dtype(s, b.rewards))
    return _dra(b, s, p.similarity_floor, p.eps, trusted=True), None


def _apply_mmr(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: MmrParams
) -> tuple[torch.Tensor, torch.Tensor]:
    s = _need_sim("mmr", sim)
    b = _checks.trusted(rewards.to(s.device), mask)
    s = s.to(_checks.compute_dtype(s, b.rewards))
    if b.mask is not None:
        s = s.masked_fill(~(b.mask.unsqueeze(-1) & b.mask.unsqueeze(-2)), 0.0)
    return _mmr(b, s, None if p.lam == "adaptive" else float(p.lam))


def _apply_none(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: NoneParams
) -> tuple[torch.Tensor, None]:
    b = _checks.trusted(rewards, mask)
    return b.unbatch(b.rewards.clone()), None


_DRA_DOC = (
    "DRA-GRPO (arXiv 2505.09655): r_i / (sum_j s_ij + eps); a completion shares its reward "
    "with the siblings it resembles."
)
_MMR_DOC = (
    "MMR-GRPO (arXiv 2601.09085): greedy maximal-marginal-relevance order; each pick's reward "
    "is lambda*r_i - (1-lambda)*max similarity to earlier picks."
)
METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(Method.DRA, DraParams, _apply_dra, True, _DRA_DOC),
        MethodSpec(Method.MMR, MmrParams, _apply_mmr, True, _MMR_DOC),
        MethodSpec(Method.NONE, NoneParams, _apply_none, False, "Rewards unchanged (GRPO)."),
    )
}


def get_method(name: object) -> MethodSpec:
    """The spec of a Method or its name; InvalidInput (field "method") for an unknown one."""
    return METHODS[parse_name(Method, name, "method", "method")]


__all__ = [
    "ADVANTAGE_KINDS",
    "METHODS",
    "DraParams",
    "MethodSpec",
    "MmrParams",
    "NoneParams",
    "get_method",
]
