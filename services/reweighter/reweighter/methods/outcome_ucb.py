"""Outcome-based exploration, historical (Song, Kempe, Munos, "Outcome-based Exploration for
LLM Reasoning", arXiv 2509.06941): a UCB-style bonus for final answers rarely seen for this
prompt across training history.

    r~_i = r_i + c * min(1, 1 / sqrt(N_i + 1))  =  r_i + c / sqrt(N_i + 1)

N_i: how often completion i's answer was given for this prompt at *earlier* training steps
(the service's memory, reweighter.memory; the +1 counts the completion itself, so an answer
never seen before gets the whole bonus c and the bonus is the paper's min{1, 1/sqrt(N)} with
the current sample counted). `scale` is c. The bonus depends on the final answer only, never on
the reasoning text: the paper's point is that the answer space of a reasoning task is small
enough to count.

Which answers: `apply_to="all"` (default) gives every answer its bonus, correct or not, as the
paper's historical exploration does (on an unsolved prompt, rarely tried wrong answers are the
exploration); `apply_to="correct"` only completions whose reward reaches `success_threshold`
(a conservative variant: exploration never pays for a wrong answer). A completion with no
answer (null) gets no bonus and is never counted.

The bonus is added before the advantage estimator, so with GRPO a group whose members all got
the same bonus still has advantages 0 (a constant shift), and an answer the policy keeps
returning gradually loses its edge to rarer siblings.
"""

from __future__ import annotations

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.context import MethodContext
from reweighter.methods.params import OutcomeUcbParams, kernel_params


def _bonus(b: _checks.Batch, counts: torch.Tensor, p: OutcomeUcbParams) -> torch.Tensor:
    r = b.rewards
    n = counts.to(r.dtype)
    has_answer = counts >= 0
    bonus = p.scale / (n.clamp_min(0.0) + 1.0).sqrt()
    if p.apply_to == "correct":
        has_answer = has_answer & (r >= p.success_threshold)
    out = r + torch.where(has_answer, bonus, torch.zeros_like(bonus))
    return out if b.mask is None else out.masked_fill(~b.mask, 0.0)


def outcome_ucb(
    rewards: torch.Tensor,
    counts: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    scale: float = 0.5,
    apply_to: str = "all",
    success_threshold: float = 1.0,
) -> torch.Tensor:
    """Rewards plus the historical-exploration bonus, from earlier counts ([G] or [B, G]
    integers, -1 for a completion without an answer); see the module docstring."""
    p = kernel_params(
        OutcomeUcbParams, scale=scale, apply_to=apply_to, success_threshold=success_threshold
    )
    b = _checks.batch(rewards, mask)
    c = counts if isinstance(counts, torch.Tensor) else torch.as_tensor(counts)
    c = c.unsqueeze(0) if b.squeeze and c.dim() == 1 else c
    if tuple(c.shape) != tuple(b.rewards.shape) or c.is_floating_point():
        raise InvalidInput(
            f"must be integers shaped like rewards, got {_checks.shape(c)} {c.dtype}",
            field="counts",
        )
    return b.unbatch(_bonus(b, c.to(b.rewards.device), p))


def apply(
    rewards: torch.Tensor,
    sim: torch.Tensor | None,
    mask: torch.Tensor | None,
    p: OutcomeUcbParams,
    *,
    ctx: MethodContext,
) -> tuple[torch.Tensor, None]:
    """The engine's kernel: `ctx.counts` from the memory, trusted input."""
    if ctx.counts is None:
        raise InvalidInput("method 'outcome_ucb' needs answers and a prompt_key", field="answers")
    b = _checks.trusted(rewards.to(ctx.counts.device), mask)
    return _bonus(b, ctx.counts, p), None
