"""The advantage estimators' catalogue: the one list of the estimators the service accepts
(`advantages` in a request), like the methods' (catalog.py).

An estimator is a kernel `apply(batch, params) -> advantages` on a checked Batch ([B, G]
rewards after reweighting) and a parameter model (`advantage_params`). Adding one is the
recipe docs/methods.md gives: its module (the kernel and its formula's docstring), its
parameter model in params.py, one entry here, and its row in docs/methods.md's estimator table;
the engine's checks, /v1/info, the assembly's raw answers and `reweighter offline`'s flags
follow from the entry (tests/methods/test_estimators.py adds one and holds each place to it).

Importing this module imports no torch: kernels and models load on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from reweighter.errors import InvalidInput
from reweighter.methods.catalog import _PARAMS, _load
from reweighter.types import AdvantageKind


@dataclass(frozen=True)
class EstimatorSpec:
    """One advantage estimator: its name, what it computes, where its parts live."""

    name: str
    description: str
    params: str
    """"module:Class" of its `advantage_params` model."""
    kernel: str
    """"module:function" taking (Batch, params) and returning [B, G] advantages."""
    methods: tuple[str, ...] | None = None
    """The methods it goes with (None: any); another is refused naming `advantages`."""
    why_methods: str = ""
    flags: str = ""
    """The prefix of its parameters' `reweighter offline` flags (`--pass-k`); default its name."""
    within_group: str | None = None
    """A parameter that may not exceed the group's size (pass_at_k's k): checked against each
    group, and a round closed short computes with it capped at the members present."""

    @property
    def params_model(self) -> type[BaseModel]:
        return _load(self.params)  # type: ignore[no-any-return]

    @property
    def apply(self) -> Callable[[Any, BaseModel], Any]:
        return _load(self.kernel)  # type: ignore[no-any-return]


_ADV = "reweighter.methods.advantages"


def _by_name(*specs: EstimatorSpec) -> dict[str, EstimatorSpec]:
    return {spec.name: spec for spec in specs}


ESTIMATORS: dict[str, EstimatorSpec] = _by_name(
    EstimatorSpec(
        AdvantageKind.GRPO,
        "GRPO (arXiv 2402.03300): (r_i - mean(r)) / (std(r) + 1e-4), the sample std.",
        params=f"{_PARAMS}:NoAdvantageParams",
        kernel=f"{_ADV}:apply_grpo",
    ),
    EstimatorSpec(
        AdvantageKind.DR_GRPO,
        "Dr. GRPO (arXiv 2503.20783): r_i - mean(r), no division by the std.",
        params=f"{_PARAMS}:NoAdvantageParams",
        kernel=f"{_ADV}:apply_dr_grpo",
    ),
    EstimatorSpec(
        AdvantageKind.PASS_AT_K,
        "Pass@k Training (arXiv 2508.10751): the closed-form advantage of pass@k over "
        "success (reward >= success_threshold) and failure.",
        params=f"{_PARAMS}:PassAtKParams",
        kernel="reweighter.methods.pass_at_k:apply",
        methods=("none",),
        flags="pass",
        why_methods="pass_at_k sees only success or failure of the base rewards",
        within_group="k",
    ),
    EstimatorSpec(
        AdvantageKind.NONE,
        "The rewards unchanged (the trainer computes its own advantages).",
        params=f"{_PARAMS}:NoAdvantageParams",
        kernel=f"{_ADV}:apply_none",
    ),
)
"""Estimator name -> spec."""


def estimator_names() -> list[str]:
    return [str(name) for name in ESTIMATORS]


def get_estimator(name: object, field: str = "advantages") -> EstimatorSpec:
    """The spec of an estimator name; InvalidInput (`field`) naming the known ones."""
    spec = ESTIMATORS.get(name) if isinstance(name, str) else None
    if spec is None:
        known = ", ".join(estimator_names())
        raise InvalidInput(f"unknown advantage kind {name!r}; known: {known}", field=field)
    return spec


__all__ = ["ESTIMATORS", "EstimatorSpec", "estimator_names", "get_estimator"]
