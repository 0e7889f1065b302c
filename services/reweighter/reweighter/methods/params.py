"""Each method's parameters as a pydantic model: the one definition of what a valid parameter is.

The engine validates a request's `params` with these models (so a bad parameter is a clean 4xx
naming it) and hands the kernels parsed, trusted values. The public kernel functions, called
directly from Python, validate their keyword arguments through the same models
(`kernel_params`), so no parameter rule is written twice.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from reweighter.errors import InvalidInput

_CONFIG = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)


class DraParams(BaseModel):
    model_config = _CONFIG

    similarity_floor: Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)] | None = Field(
        0.0,
        description="Off-diagonal similarities below this count as this. 0.0 (default) keeps "
        "every reward's sign; null reproduces the authors' code (negative row sums flip signs).",
    )
    eps: float = Field(1e-6, gt=0.0, allow_inf_nan=False, description="Added to the denominator.")


ADAPTIVE = "adaptive"
"""MMR's `lambda` value meaning sigmoid(std(rewards)) per group; `MmrParams.fixed_lambda` is the
one place that tells it from a number."""


class MmrParams(BaseModel):
    model_config = _CONFIG

    lam: Annotated[float, Field(ge=0.0, le=1.0)] | Literal["adaptive"] = Field(
        "adaptive",
        alias="lambda",
        description='Reward vs novelty trade-off in [0, 1], or "adaptive": sigmoid(std(rewards)) '
        "per group.",
    )
    equal_rewards: Literal["keep", "diversify"] = Field(
        "keep",
        description='A group whose rewards all agree: "keep" leaves it as it is (lambda = 1, '
        'so GRPO advantages are 0); "diversify" applies MMR anyway (the paper: the novelty '
        "term alone spreads the rewards).",
    )

    @field_validator("lam", mode="before")
    @classmethod
    def _one_clear_error(cls, v: Any) -> Any:
        """One message instead of pydantic's per-branch union errors."""
        if v == ADAPTIVE and isinstance(v, str):
            return v
        x: float | None = None
        if isinstance(v, int | float) and not isinstance(v, bool):  # "0.5" (a string) is not
            try:
                x = float(v)
            except OverflowError:  # an integer literal beyond any float
                x = None
        if x is None or not math.isfinite(x) or not 0.0 <= x <= 1.0:
            raise ValueError(f'must be a number in [0, 1] or "adaptive", got {v!r}')
        return x

    @property
    def fixed_lambda(self) -> float | None:
        """λ as the kernel takes it: a number, or None for adaptive (computed per group)."""
        return None if self.lam == ADAPTIVE else float(self.lam)


class NoneParams(BaseModel):
    model_config = _CONFIG


# What a kernel keyword argument must be, for the message a direct Python caller sees.
_RULES = {
    "similarity_floor": "must be a number in [-1, 1] or None",
    "class_threshold": "must be a number in [-1, 1]",
    "diversity_floor": "must be a number in [0, 1]",
    "scale": "must be a finite number >= 0",
    "apply_to": 'must be "all" or "correct"',
    "baseline": 'must be a finite number, "mean" or None',
    "target": 'must be "advantage" or "reward"',
    "success_threshold": "must be a finite number",
    "k": "must be an integer >= 1",
    "eps": "must be a finite number > 0",
    "lam": 'must be a number in [0, 1] or "adaptive"',
    "equal_rewards": 'must be "keep" or "diversify"',
}

P = TypeVar("P", bound=BaseModel)


def kernel_params(model: type[P], **values: Any) -> P:
    """Keyword arguments of a public kernel, validated by the method's model.

    A bad value is an InvalidInput naming the keyword argument (`lam`, not its alias).
    """
    try:
        return model.model_validate(values)
    except ValidationError as e:
        loc = e.errors()[0]["loc"]
        alias = str(loc[0]) if loc else ""
        name = next((n for n, f in model.model_fields.items() if alias in (n, f.alias)), alias)
        rule = _RULES.get(name, "is not a valid value")
        raise InvalidInput(f"{rule}, got {values.get(name)!r}", field=name) from None


CLASS_THRESHOLD = 0.92
"""Default cosine similarity at which two completions are one answer class (when a group has
no `answers`). Calibrated on the pickone experiment's logged groups: docs/methods.md, "Answer
classes", and bench/tools/calibrate_classes.py."""


class DarlingParams(BaseModel):
    model_config = _CONFIG

    class_threshold: float = Field(
        CLASS_THRESHOLD,
        ge=-1.0,
        le=1.0,
        allow_inf_nan=False,
        description="For a group without answers: completions whose cosine similarity reaches "
        "this are one class (connected components). Ignored for groups that carry answers.",
    )
    diversity_floor: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="Diversity d_i below this counts as this. 0.1 as the authors' code: a "
        "group of one class keeps its quality differences (scaled) instead of all rewards 0; "
        "0.0 gives the paper's formula exactly.",
    )


class OutcomeUcbParams(BaseModel):
    """Historical exploration of arXiv 2509.06941: c * (min(1, 1/sqrt(N)) - baseline)."""

    model_config = _CONFIG

    scale: float = Field(
        0.2,
        ge=0.0,
        allow_inf_nan=False,
        description="c in c * (min(1, 1/sqrt(N)) - baseline); 0.2 as in the paper's runs.",
    )
    baseline: float | Literal["mean"] | None = Field(
        0.5,
        description="Subtracted from each bonus: a number b0 (the paper's UCB-Con; 0.5 its "
        'medium-data value: answers seen more than 1/b0^2 times are pushed down), "mean" (the '
        "mean bonus of the group: UCB-Mean) or null (none: the paper's naive UCB).",
    )
    target: Literal["advantage", "reward"] = Field(
        "advantage",
        description='"advantage": the term is added after the advantage estimator (the '
        'paper; with advantages "none" it lands in the rewards); "reward": added to the '
        "rewards before it (reward shaping: GRPO then rescales it per group).",
    )
    apply_to: Literal["all", "correct"] = Field(
        "all",
        description='"all": every answer gets the term, correct or not (the paper); '
        '"correct": only completions whose reward reaches success_threshold (not the paper).',
    )
    success_threshold: float = Field(
        1.0, allow_inf_nan=False, description='A correct answer\'s reward, for apply_to="correct".'
    )

    @field_validator("baseline", mode="before")
    @classmethod
    def _one_clear_error(cls, v: Any) -> Any:
        """One message instead of pydantic's per-branch union errors."""
        if v is None or (isinstance(v, str) and v == "mean"):
            return v
        if isinstance(v, int | float) and not isinstance(v, bool):
            try:
                x = float(v)
            except OverflowError:
                x = math.inf
            if math.isfinite(x):
                return x
        raise ValueError(f'must be a finite number, "mean" or null, got {v!r}')

    @property
    def baseline_value(self) -> float:
        """The constant baseline (0 for none); "mean" is computed per group by the kernel."""
        return 0.0 if self.baseline is None or self.baseline == "mean" else float(self.baseline)


class PassAtKParams(BaseModel):
    """The `advantage_params` of the `pass_at_k` estimator."""

    model_config = _CONFIG

    k: int = Field(..., ge=1, description="k of pass@k: 1 <= k <= the group's size.")
    success_threshold: float = Field(
        1.0,
        allow_inf_nan=False,
        description="A completion succeeds when its reward is at least this.",
    )

    @field_validator("k", mode="before")
    @classmethod
    def _whole_number(cls, v: Any) -> Any:
        """An integer; an integral float too (gRPC's Struct carries every number as a double),
        never a bool or a string."""
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"must be an integer >= 1, got {v!r}")
        if isinstance(v, float) and not (math.isfinite(v) and v == int(v)):
            raise ValueError(f"must be an integer >= 1, got {v!r}")
        return int(v)


class NoAdvantageParams(BaseModel):
    """The estimators that take no `advantage_params` (grpo, dr_grpo, none)."""

    model_config = _CONFIG
