"""Darling: quality x diversity over answer classes (Li et al., "Jointly Reinforcing Diversity
and Quality in Language Model Generations", arXiv 2509.02534; code facebookresearch/darling).

A group is partitioned into classes (methods/classes.py: from given answers, or connected
components of the embeddings' cosine graph). With n valid items and |c_i| the size of item i's
class:

    d_i  = #{j != i : class_j != class_i} / (n - 1) = (n - |c_i|) / (n - 1)
    r~_i = r_i * max(d_i, diversity_floor)

A completion whose answer nobody else gave keeps its reward (d = 1); n copies of one answer
each keep `diversity_floor` of theirs. A group of one has no siblings: d = 1.

Against the authors' code (verl/verl/utils/reward_score/partition_reward_vllm_serve.py, read
for this): the same normalisation, (n - |c_i|) / (n - 1), and the same floor, `max(d, 0.1)`,
multiplied into the quality reward (their `multiplicative=True` run, with GRPO's std
normalisation off: our `advantages: "dr_grpo"`). We differ in the classes: theirs come from a
learned pairwise classifier (P(same) > 0.5, plus exact unigram overlap for answers of at most
5 words); ours from the answers the reward function extracted, or from embedding similarity
with a calibrated threshold, because the service has no classifier and an answer string is
exact where one exists. `diversity_floor=0` gives the paper's formula without the floor.

Rewards are non-negative qualities in the paper (correctness in {0, 1}), where a wrong answer's
0 stays 0 whatever its diversity. A negative reward (a penalty, as the papers' format/length
rewards give a wrong answer) is kept as it is, for the same reason: multiplying it by d would
shrink the penalty of a *collapsed* wrong answer (d at the floor) ten-fold while a unique wrong
answer kept all of it, rewarding collapse. So r~_i = r_i * max(d_i, floor) for r_i > 0, r_i
otherwise: diversity scales quality, never a penalty. With a request's `quality`
(types.Group.quality) the engine runs this on the quality part only and adds the rest (a format
term) back unchanged (MethodSpec.run): on picktwo-main's groups that alone leaves no right
completion below a wrong one (EXPERIMENTS.md).

**A completion that gives no answer gets no diversity credit: d = 0** (so the floor's
`diversity_floor` share of a positive reward, the least any completion keeps). Before issue
40 a missing answer was a class of its own (classes.answer_labels), so an unparseable
completion counted as maximally novel and kept its whole reward: under the papers' reward
(format 1 + correctness 2) a formatted completion that named nothing the checker reads kept
its +1 while a correct answer given by three siblings fell to 0.1 x ~3, ranking a wrong
completion above right ones (picktwo-main's Darling groups: 14 of 466 mixed groups; in 103 a
correct completion's advantage turned negative where GRPO's was positive). Why d = 0 and not one
shared "no answer" class: a shared class still gives a lone unanswered completion d = 1, the
same inversion. Against the paper: its quality reward is 0/1 correctness, where a completion
without an answer scores 0 and its diversity never counts (0 x d = 0); diversity there is
novelty *among answers* (the partition classifier compares responses' content), and "no
answer" is not a new answer. So d = 0 changes nothing under the paper's own reward and removes
the inversion under a reward that pays for format. Answered completions still count the
unanswered ones as different from themselves (a lone right answer among failures keeps d = 1).
Which items answered: the engine passes `ctx.answered` (False where a group's given answer is
None; True for every item of a group whose classes come from the embeddings);
`darling(..., answered=)` takes it directly. Equivariant: `answered` moves with its item.
"""

from __future__ import annotations

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.classes import same_class, similarity_classes
from reweighter.methods.context import MethodContext
from reweighter.methods.params import DarlingParams, kernel_params


def _diversity(b: _checks.Batch, labels: torch.Tensor) -> torch.Tensor:
    """d_i = (n - |c_i|) / (n - 1) per item ([B, G]; 1 for a group of one, 0 at masked items)."""
    same = same_class(labels)
    size = same.sum(-1).to(b.rewards.dtype)
    n = b.counts().unsqueeze(-1)
    d = torch.where(n > 1, (n - size) / (n - 1).clamp_min(1.0), torch.ones_like(size))
    return d if b.mask is None else d.masked_fill(~b.mask, 0.0)


def _darling(b: _checks.Batch, labels: torch.Tensor, floor: float,
             answered: torch.Tensor | None = None) -> torch.Tensor:
    d = _diversity(b, labels)
    if answered is not None:  # no answer, no diversity credit (module docstring)
        d = d.masked_fill(~answered, 0.0)
    d = d.clamp_min(floor)
    # diversity scales quality, never a penalty (module docstring): r <= 0 is kept
    out = torch.where(b.rewards > 0, b.rewards * d, b.rewards)
    return out if b.mask is None else out.masked_fill(~b.mask, 0.0)


def _per_item(t: torch.Tensor, b: _checks.Batch, field: str) -> torch.Tensor:
    """One value per item ([G] or [B, G]) as [B, G] on the rewards' device, shape checked."""
    t = t.unsqueeze(0) if b.squeeze and t.dim() == 1 else t
    if tuple(t.shape) != tuple(b.rewards.shape):
        raise InvalidInput(
            f"shape {_checks.shape(t)} does not match rewards {_checks.shape(b.rewards)}",
            field=field,
        )
    return t.to(b.rewards.device)


def _labels(x: object, b: _checks.Batch) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise InvalidInput(f"must be integer class labels, got dtype {t.dtype}", field="classes")
    t = _per_item(t, b, "classes").long()
    if b.mask is not None:
        t = t.masked_fill(~b.mask, -1)
    if bool((t < 0).any() if b.mask is None else ((t < 0) & b.mask).any()):
        raise InvalidInput("class labels of valid items must be >= 0", field="classes")
    return t


def _answered(x: object, b: _checks.Batch) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    if t.dtype != torch.bool:
        raise InvalidInput(f"must be booleans, got dtype {t.dtype}", field="answered")
    return _per_item(t, b, "answered")


def darling(
    rewards: torch.Tensor,
    classes: torch.Tensor | None = None,
    *,
    sim: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    answered: torch.Tensor | None = None,
    class_threshold: float | None = None,
    diversity_floor: float = 0.1,
) -> torch.Tensor:
    """Darling-reweighted rewards, shaped like `rewards` ([G] or [B, G]); see the module
    docstring. The classes: `classes`, labels ([G] or [B, G] integers; items with equal labels
    are one class), or from cosine similarities `sim` ([G, G] or [B, G, G]): the connected
    components of s_ij >= class_threshold (default: the calibrated CLASS_THRESHOLD); give one.
    `answered` ([G] or [B, G] booleans, default all True): False where a completion gave no
    answer, which then gets d = 0."""
    values = {"diversity_floor": diversity_floor}
    if class_threshold is not None:
        values["class_threshold"] = class_threshold
    p = kernel_params(DarlingParams, **values)
    if (classes is None) == (sim is None):
        both = ", not both" if sim is not None else ""
        raise InvalidInput(f"give either classes or sim{both}", field="classes")
    if classes is not None:
        b = _checks.batch(rewards, mask)
        labels = _labels(classes, b)
    else:
        b, s = _checks.prepare(sim, rewards, mask, "similarity", 1)
        labels = similarity_classes(s, b.mask, p.class_threshold)
    ans = None if answered is None else _answered(answered, b)
    return b.unbatch(_darling(b, labels, p.diversity_floor, ans))


def apply(
    rewards: torch.Tensor,
    sim: torch.Tensor | None,
    mask: torch.Tensor | None,
    p: DarlingParams,
    *,
    ctx: MethodContext,
) -> tuple[torch.Tensor, None]:
    """The engine's kernel: classes from `ctx.classes` (built by the engine from answers or the
    similarities), trusted input."""
    if ctx.classes is None:
        raise InvalidInput("method 'darling' needs answer classes", field="answers")
    b = _checks.trusted(rewards.to(ctx.classes.device), mask)
    return _darling(b, ctx.classes, p.diversity_floor, ctx.answered), None
