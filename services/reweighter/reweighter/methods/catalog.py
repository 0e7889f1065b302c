"""The method catalogue: every reweighting method, listed once, importable without torch.

Each entry names a method, says what it does, and points at its parameter model (pydantic) and
its batched kernel (torch) as "module:attribute" paths that are imported on first use. The
wire models (HTTP schema, gRPC), the CLI flags, `/v1/info`, the metrics labels and the docs
table all read this list, so a light client that never reweights never imports torch, and a
new method is one entry here (see the recipe in the `reweighter` package docstring).

A kernel is `apply(rewards [B, G], sim [B, G, G] | None, mask [B, G] | None, params)` and returns
(new rewards [B, G], λ per group [B] or None). Its input is trusted: the engine checked it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..types import Method

if TYPE_CHECKING:
    from pydantic import BaseModel

Apply = Callable[[Any, Any, Any, Any], tuple[Any, Any]]


@cache
def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    try:
        return getattr(import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ImportError(f"method catalogue: cannot load {path!r}: {e}") from e


@dataclass(frozen=True)
class MethodSpec:
    """One method: `params` and `kernel` are "module:attribute" paths, loaded on first use."""

    name: str
    description: str
    params: str
    kernel: str
    needs_similarity: bool = True
    """False: the engine calls `kernel` with `sim=None` (the group's similarities are still
    computed for `stats.mean_similarity`)."""
    needs: tuple[str, ...] = ()
    """What the engine must build for this method beyond rewards and similarities: "classes"
    (answer classes, methods/classes.py), "memory" (answer counts at earlier steps; the request
    then needs `step` and each group `prompt_key` and `answers`). A kernel with needs takes the
    keyword `ctx` (methods/context.py)."""
    after: str | None = None
    """A "module:attribute" kernel run after the advantage estimator: `after(advantages [B, G],
    base rewards [B, G], mask, params, ctx=...)` -> advantages [B, G]. With advantages "none" it
    gets the method's rewards as the advantages (the identity estimator) and its result is
    what the request returns as rewards. outcome_ucb's bonus goes here (the paper adds it to
    the advantage, outside the group normalisation)."""

    @property
    def params_model(self) -> type[BaseModel]:
        return _load(self.params)

    @property
    def apply(self) -> Apply:
        return _load(self.kernel)

    @property
    def apply_after(self) -> Callable[..., Any] | None:
        return _load(self.after) if self.after else None

    def run(
        self,
        rewards: Any,
        sim: Any,
        mask: Any,
        params: Any,
        ctx: Any = None,
        quality: Any = None,
        given: Any = None,
    ) -> tuple[Any, Any]:
        """The kernel on [B, G] `rewards`, or on their `quality` part ([B, G]) when given: the
        one place a kernel is called (the engine, the replay, the tests).

        With quality, the rest (`rewards - quality`: a format term) is added back unchanged,
        so the method scales quality alone, and then `right_above_wrong` keeps every completion
        of positive quality at or above its group's completions of non-positive quality
        (correctness before diversity: docs/methods.md). `given` ([B] bool): the groups that
        gave a quality; the others pass their rewards as quality (rest 0) and are reweighted
        exactly as without it.
        """
        base = rewards if quality is None else quality
        if self.needs:
            new, lam = self.apply(base, sim, mask, params, ctx=ctx)
        else:
            new, lam = self.apply(base, sim, mask, params)
        if quality is not None:
            quality = quality.to(new.device, new.dtype)
            rest = rewards.to(new.device, new.dtype) - quality
            new = new + (rest if mask is None else rest.masked_fill(~mask, 0.0))
            new = right_above_wrong(new, quality, mask, given)
        return new, lam


def right_above_wrong(new: Any, quality: Any, mask: Any = None, given: Any = None) -> Any:
    """[B, G] reweighted rewards with each completion of positive quality raised, where needed,
    to the highest reweighted reward among its group's completions of quality <= 0.

    Scaling quality alone keeps a right answer's quality above a wrong one's, but the rest is
    added back as it is: a right answer without the format term (rest 0) whose quality a
    diversity term cut from 1.2 to 0.4 still ends below a formatted wrong answer (rest 1,
    quality -0.02), which the base reward ranked below it. On picktwo-main's logged groups that
    left 3 of 469 mixed DRA groups and 2 of 464 MMR groups inverted (EXPERIMENTS.md). The lift
    makes principle 16 hold whatever the rests: diversity reorders right answers among
    themselves and wrong answers among themselves, never one across the other (a tie at most).
    A group with no completion of quality <= 0, or not in `given`, is unchanged."""
    wrong = quality <= 0
    right = quality > 0
    if mask is not None:
        wrong, right = wrong & mask, right & mask
    if given is not None:
        right = right & given.to(right.device).unsqueeze(-1)
    if not bool(right.any()) or not bool(wrong.any()):
        return new
    floor = new.masked_fill(~wrong, float("-inf")).amax(-1, keepdim=True)
    return new.maximum(floor).where(right, new)


_PARAMS = "reweighter.methods.params"

CATALOG: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            Method.DRA,
            "DRA-GRPO (arXiv 2505.09655): r_i / (sum_j s_ij + eps), a penalty (r_i <= 0) kept "
            "as it is; a completion shares its reward with the siblings it resembles.",
            params=f"{_PARAMS}:DraParams",
            kernel="reweighter.methods.dra:apply",
        ),
        MethodSpec(
            Method.MMR,
            "MMR-GRPO (arXiv 2601.09085): greedy maximal-marginal-relevance order; each pick's "
            "reward is lambda*r_i - (1-lambda)*max similarity to earlier picks (r_i, not "
            "lambda*r_i, for a penalty r_i < 0).",
            params=f"{_PARAMS}:MmrParams",
            kernel="reweighter.methods.mmr:apply",
        ),
        MethodSpec(
            Method.DARLING,
            "Darling (arXiv 2509.02534): r_i * max(d_i, floor), d_i the share of the group "
            "outside i's answer class (classes from answers, or from embeddings).",
            params=f"{_PARAMS}:DarlingParams",
            kernel="reweighter.methods.darling:apply",
            needs=("classes",),
        ),
        MethodSpec(
            Method.OUTCOME_UCB,
            "Outcome-based exploration (arXiv 2509.06941): A_i + c * (min(1, 1/sqrt(N_i)) - b0), "
            "N_i how often i's answer was seen for this prompt_key at earlier steps.",
            params=f"{_PARAMS}:OutcomeUcbParams",
            kernel="reweighter.methods.outcome_ucb:apply",
            after="reweighter.methods.outcome_ucb:after",
            needs_similarity=False,
            needs=("memory",),
        ),
        MethodSpec(
            Method.NONE,
            "Rewards unchanged (GRPO).",
            params=f"{_PARAMS}:NoneParams",
            kernel="reweighter.methods.none:apply",
            needs_similarity=False,
        ),
    )
}
"""Method name -> spec: the one list of the methods the service accepts."""


def method_names() -> list[str]:
    return [str(name) for name in CATALOG]


def get_method(name: object) -> MethodSpec:
    """The spec of a method name; InvalidInput (field "method") naming the known ones."""
    spec = CATALOG.get(name) if isinstance(name, str) else None
    if spec is None:
        known = ", ".join(method_names())
        raise InvalidInput(f"unknown method {name!r}; known: {known}", field="method")
    return spec


def parameters() -> Iterator[tuple[str, str, Any]]:
    """(method, wire name, pydantic field) for every parameter of every method."""
    for name, spec in CATALOG.items():
        for field_name, f in spec.params_model.model_fields.items():
            yield str(name), f.alias or field_name, f
