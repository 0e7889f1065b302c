"""Outcome-based exploration, historical (Song, Kempe, Munos, "Outcome-based Exploration for
LLM Reasoning", arXiv 2509.06941): a UCB-style bonus for final answers rarely seen for this
prompt across training history, added to the advantage.

The paper's objective (its eq. for historical exploration) adds, per completion i of question x,

    A~_i = A_i + c * (b_ucb(x, a_i) - beta),     b_ucb(x, a) = min{1, 1 / sqrt(N(x, a))}

to the GRPO advantage A_i: the bonus sits *outside* the group normalisation, so it keeps its
scale c whatever the rewards' spread (an unsolved group, all rewards 0, still gets it). N(x, a)
is the number of times answer a was sampled for x. `beta` is the baseline: none (the paper's
"naive" UCB), the mean of the group's bonuses ("UCB-Mean") or a constant b0 ("UCB-Con", the
paper's best; b0 = 0.5 on its medium data, 1 on its easy data; c = 0.2 in its runs). With b0,
an answer seen more than 1/b0^2 times is pushed down: exploration away from it.

Here (docs/methods.md, "Outcome-based exploration", says what we read and why):

- N_i counts the answer at the prompt key's **earlier steps** only (reweighter.memory); a
  never-seen answer has N = 0 and gets min{1, 1/0} = 1: the min of the paper's form is exactly
  what makes N = 0 well defined. Siblings in the same step do not lower each other's bonus
  (that is the paper's *batch* exploration, a different method), and a retried call sees the
  same counts.
- `target="advantage"` (default) adds c (b - beta) after the advantage estimator, as the paper;
  with `advantages: "none"` the estimator is the identity, so the term lands in the returned
  rewards (a stack that normalises them itself then scales it: ask for "grpo" to keep the
  paper's form). `target="reward"` adds it to the rewards before the estimator (reward shaping).
- `apply_to="all"` (default) gives every answer its bonus, correct or not, as the paper does;
  `"correct"` only completions whose reward reaches `success_threshold` (our variant, not the
  paper's). A completion with no answer (null) gets no term, counts for no baseline and is
  never counted.
- With a request's `quality` (types.Group.quality) the term is the same (it is added, not a
  scale); `apply_to="correct"` then tests the quality against `success_threshold`.
"""

from __future__ import annotations

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.context import MethodContext
from reweighter.methods.params import OutcomeUcbParams, kernel_params


def _term(b: _checks.Batch, counts: torch.Tensor, p: OutcomeUcbParams) -> torch.Tensor:
    """c * (min(1, 1/sqrt(N)) - beta) per eligible item, 0 elsewhere; [B, G] like b.rewards."""
    r = b.rewards
    eligible = counts >= 0
    if p.apply_to == "correct":
        eligible = eligible & (r >= p.success_threshold)
    if b.mask is not None:
        eligible = eligible & b.mask
    # min(1, 1/sqrt(N)) for whole N >= 0: N = 0 and N = 1 both give 1.
    bonus = counts.to(r.dtype).clamp_min(1.0).rsqrt()
    if p.baseline == "mean":
        w = eligible.to(r.dtype)
        beta = ((bonus * w).sum(-1) / w.sum(-1).clamp_min(1.0)).unsqueeze(-1)
    else:
        beta = torch.as_tensor(p.baseline_value, dtype=r.dtype, device=r.device)
    return torch.where(eligible, p.scale * (bonus - beta), torch.zeros_like(r))


def outcome_ucb(
    rewards: torch.Tensor,
    counts: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    scale: float = 0.2,
    baseline: float | str | None = 0.5,
    apply_to: str = "all",
    success_threshold: float = 1.0,
) -> torch.Tensor:
    """The historical-exploration term c (min(1, 1/sqrt(N)) - beta) added to `rewards` ([G] or
    [B, G]; pass advantages to get the paper's form), from the counts at earlier steps ([G] or
    [B, G] integers, -1 for a completion without an answer); see the module docstring."""
    p = kernel_params(
        OutcomeUcbParams,
        scale=scale,
        baseline=baseline,
        apply_to=apply_to,
        success_threshold=success_threshold,
    )
    b = _checks.batch(rewards, mask)
    c = counts if isinstance(counts, torch.Tensor) else torch.as_tensor(counts)
    c = c.unsqueeze(0) if b.squeeze and c.dim() == 1 else c
    if tuple(c.shape) != tuple(b.rewards.shape) or c.is_floating_point():
        raise InvalidInput(
            f"must be integers shaped like rewards, got {_checks.shape(c)} {c.dtype}",
            field="counts",
        )
    out = b.rewards + _term(b, c.to(b.rewards.device), p)
    return b.unbatch(out if b.mask is None else out.masked_fill(~b.mask, 0.0))


def _counts(ctx: MethodContext) -> torch.Tensor:
    if ctx.counts is None:
        raise InvalidInput("method 'outcome_ucb' needs answers and a prompt_key", field="answers")
    return ctx.counts


def apply(
    rewards: torch.Tensor,
    sim: torch.Tensor | None,
    mask: torch.Tensor | None,
    p: OutcomeUcbParams,
    *,
    ctx: MethodContext,
) -> tuple[torch.Tensor, None]:
    """Before the estimator: the rewards plus the term for `target="reward"`, else unchanged."""
    counts = _counts(ctx)
    b = _checks.trusted(rewards.to(counts.device), mask)
    out = b.rewards + _term(b, counts, p) if p.target == "reward" else b.rewards.clone()
    return out if b.mask is None else out.masked_fill(~b.mask, 0.0), None


def after(
    advantages: torch.Tensor,
    rewards: torch.Tensor,
    mask: torch.Tensor | None,
    p: OutcomeUcbParams,
    *,
    ctx: MethodContext,
) -> torch.Tensor:
    """After the estimator: the advantages plus the term for `target="advantage"` (the paper).
    `rewards` are the base rewards (what `apply_to="correct"` tests)."""
    if p.target != "advantage":
        return advantages
    counts = _counts(ctx)
    b = _checks.trusted(rewards.to(counts.device), mask)
    out = advantages.to(b.rewards.dtype) + _term(b, counts, p)
    return out if b.mask is None else out.masked_fill(~b.mask, 0.0)
