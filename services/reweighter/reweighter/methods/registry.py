"""The method registry: a name maps to its function and the pydantic model of its parameters.

The engine validates a request's `params` with `params_model` (so a bad parameter is a clean
4xx naming it) and then calls `apply` on whole batches of groups. `info()` publishes each
model's JSON schema, so clients can discover the methods and their parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.advantages import ADVANTAGE_KINDS
from reweighter.methods.dra import dra_from_similarity
from reweighter.methods.mmr import mmr_from_similarity

_CONFIG = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class DraParams(BaseModel):
    model_config = _CONFIG

    similarity_floor: Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)] | None = Field(
        0.0,
        description="Off-diagonal similarities below this count as this. 0.0 (default) keeps "
        "every reward's sign; null reproduces the authors' code (negative row sums flip signs).",
    )
    eps: float = Field(1e-6, gt=0.0, allow_inf_nan=False, description="Added to the denominator.")


class MmrParams(BaseModel):
    model_config = _CONFIG

    lam: Annotated[float, Field(ge=0.0, le=1.0)] | Literal["adaptive"] = Field(
        "adaptive",
        alias="lambda",
        description='Reward vs novelty trade-off in [0, 1], or "adaptive": sigmoid(std(rewards)) '
        "per group.",
    )

    @field_validator("lam", mode="before")
    @classmethod
    def _one_clear_error(cls, v: Any) -> Any:
        """One message instead of pydantic's per-branch union errors."""
        if v == "adaptive" and isinstance(v, str):
            return v
        x: float | None = None
        if isinstance(v, int | float) and not isinstance(v, bool):
            x = float(v)
        elif isinstance(v, str):
            try:
                x = float(v)
            except ValueError:
                x = None
        if x is None or not math.isfinite(x) or not 0.0 <= x <= 1.0:
            raise ValueError(f'must be a number in [0, 1] or "adaptive", got {v!r}')
        return x


class NoneParams(BaseModel):
    model_config = _CONFIG


Apply = Callable[
    [torch.Tensor, torch.Tensor | None, torch.Tensor | None, Any],
    tuple[torch.Tensor, torch.Tensor | None],
]


@dataclass(frozen=True)
class MethodSpec:
    """`apply(rewards [B, G], sim [B, G, G] | None, mask [B, G] | None, params)` returns
    (new rewards [B, G], λ per group [B] or None)."""

    name: str
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
    out = dra_from_similarity(
        rewards, _need_sim("dra", sim), mask=mask, similarity_floor=p.similarity_floor, eps=p.eps
    )
    return out, None


def _apply_mmr(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: MmrParams
) -> tuple[torch.Tensor, torch.Tensor]:
    return mmr_from_similarity(rewards, _need_sim("mmr", sim), mask=mask, lam=p.lam)


def _apply_none(
    rewards: torch.Tensor, sim: torch.Tensor | None, mask: torch.Tensor | None, p: NoneParams
) -> tuple[torch.Tensor, None]:
    b = _checks.batch(rewards, mask)  # the same checks as the other methods: NaN is an error
    return b.unbatch(b.rewards.clone()), None


METHODS: dict[str, MethodSpec] = {
    "dra": MethodSpec(
        name="dra",
        params_model=DraParams,
        apply=_apply_dra,
        needs_similarity=True,
        description="DRA-GRPO (arXiv 2505.09655): r_i / (sum_j s_ij + eps); a completion "
        "shares its reward with the siblings it resembles.",
    ),
    "mmr": MethodSpec(
        name="mmr",
        params_model=MmrParams,
        apply=_apply_mmr,
        needs_similarity=True,
        description="MMR-GRPO (arXiv 2601.09085): greedy maximal-marginal-relevance order; "
        "each pick's reward is lambda*r_i - (1-lambda)*max similarity to earlier picks.",
    ),
    "none": MethodSpec(
        name="none",
        params_model=NoneParams,
        apply=_apply_none,
        needs_similarity=False,
        description="Rewards unchanged (the GRPO baseline).",
    ),
}


def get_method(name: str) -> MethodSpec:
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise InvalidInput(
            f"unknown method {name!r}; known: {', '.join(METHODS)}", field="method"
        ) from None


__all__ = [
    "ADVANTAGE_KINDS",
    "METHODS",
    "DraParams",
    "MethodSpec",
    "MmrParams",
    "NoneParams",
    "get_method",
]
