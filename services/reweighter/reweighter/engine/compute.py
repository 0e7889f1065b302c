"""Result assembly: checked groups and their vectors in, a ReweightResult out.

Everything here trusts its input (engine/checks.py judged it): the groups are padded into one
[B, G] batch, their similarities computed by one bmm per embedding width, and the method, the
advantages and the statistics run on the whole batch at once on `device`. The advantages of
raw rewards (a round of members answered short) come from here too (`raw_advantages`): one
estimator path for every number a member or a request is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel

from ..errors import InvalidInput
from ..methods import batched_advantages, batched_cosine, batched_mean_similarity, get_method
from ..methods._checks import Batch, all_finite
from ..methods.classes import (
    answer_labels,
    class_counts,
    distinct_answers,
    effective_size,
    similarity_classes,
)
from ..methods.context import MethodContext
from ..methods.estimators import get_estimator
from ..types import AdvantageKind, GroupResult, GroupStats, ReweightResult
from .checks import Checked


def reweight_checked(
    checked: Checked,
    vectors: list[np.ndarray],
    device: torch.device,
    model: str | None,
    counts: list[list[int]] | None = None,
) -> ReweightResult:
    """`counts`: outcome_ucb's earlier counts per item (-1 for a null answer), from the memory."""
    spec = get_method(checked.method)
    b = len(vectors)
    g_max = max(len(r) for r in checked.rewards)
    with torch.inference_mode():
        # float64: rewards are any finite doubles (3e38, 1e20 apart from 0); in float32 their
        # sums overflow or their differences round away. The similarities stay float32.
        if all(len(r) == g_max for r in checked.rewards):  # the usual request: no padding
            rewards = torch.tensor(checked.rewards, dtype=torch.float64, device=device)
            mask = torch.ones(b, g_max, dtype=torch.bool, device=device)
            ragged = None
        else:
            rewards = torch.zeros(b, g_max, dtype=torch.float64, device=device)
            mask = torch.zeros(b, g_max, dtype=torch.bool, device=device)
            for i, r in enumerate(checked.rewards):
                rewards[i, : len(r)] = torch.tensor(r, dtype=torch.float64)
                mask[i, : len(r)] = True
            ragged = mask
        quality, given_q = _quality(checked, rewards)
        sim = batched_similarity(vectors, g_max, device)
        ctx = _context(checked, sim, ragged, counts, device)
        # A method that declares it needs no similarity gets none (it still feeds the stats).
        given = sim if spec.needs_similarity else None
        new, lam = spec.run(rewards, given, mask, checked.params, ctx, quality, given_q)
        adv = advantages_of(Batch(new, ragged, False), checked.advantages, checked.advantage_params)
        if (after := spec.apply_after) is not None:
            # After the estimator (outcome_ucb's bonus); with no estimator, on the rewards.
            # What it tests (apply_to="correct") is the quality where a request gave it.
            base = rewards if quality is None else quality
            if adv is not None:
                adv = after(adv, base, ragged, checked.params, ctx=ctx)
            else:
                new = after(new, base, ragged, checked.params, ctx=ctx)
        mean_sim = batched_mean_similarity(sim, ragged)
        _all_finite(new, adv, ragged)
        new_l, mean_l = new.cpu().tolist(), mean_sim.cpu().tolist()
        eff_l = effective_size(sim, ragged).cpu().tolist()
        adv_l = adv.cpu().tolist() if adv is not None else None
        lam_l = lam.cpu().tolist() if lam is not None else None
        classes_l = class_counts(ctx.classes).cpu().tolist() if ctx.classes is not None else None

    out = []
    for i, r in enumerate(checked.rewards):
        n = len(r)
        out.append(
            GroupResult(
                id=checked.ids[i],
                rewards=new_l[i][:n],
                advantages=adv_l[i][:n] if adv_l is not None else None,
                stats=GroupStats(
                    mean_similarity=mean_l[i],
                    lambda_=lam_l[i] if lam_l is not None else None,
                    effective_size=eff_l[i],
                    distinct_answers=(
                        distinct_answers(a) if (a := checked.answers[i]) is not None else None
                    ),
                    classes=int(classes_l[i]) if classes_l is not None else None,
                ),
            )
        )
    return ReweightResult(method=str(checked.method), model=model, groups=out)


def _quality(
    checked: Checked, rewards: torch.Tensor
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """[B, G] float64 quality parts (a group without one: its rewards, so its rest is 0; 0 at
    padding) and [B] which groups gave one; (None, None) when none did (the method then scales
    the whole reward)."""
    if checked.quality is None:
        return None, None
    q = rewards.clone()
    given = torch.zeros(len(checked.quality), dtype=torch.bool, device=rewards.device)
    for i, qi in enumerate(checked.quality):
        if qi is not None:
            q[i, : len(qi)] = torch.tensor(qi, dtype=torch.float64)
            given[i] = True
    return q, given


def advantages_of(b: Batch, kind: str, params: BaseModel | None) -> torch.Tensor | None:
    """The estimator `kind` of the catalogue (methods/estimators.py) over a [B, G] batch of
    rewards, None for "none": the one place the engine computes advantages, for /v1/reweight
    (after the method, above) and for the raw rewards of a round answered short
    (`raw_advantages`), so a member's raw answer is the number /v1/reweight would give."""
    if kind == AdvantageKind.NONE:
        return None
    return batched_advantages(b, kind, params)


def raw_advantages(
    rewards: Sequence[float], kind: str, params: Mapping[str, Any] | None = None
) -> list[float] | None:
    """Advantages of rewards that were not reweighted (the members present in a round that
    closed short, or a member answered alone): `advantages_of` on the float64 rewards that
    /v1/reweight with method "none" hands it, on the CPU (a few members; no batch to join).
    `params`: the estimator's, validated when the round opened (stored as JSON). A
    `within_group` parameter (pass_at_k's k) over more members than present is capped at them:
    the round was checked against its group_size, not against the members that came."""
    if kind == AdvantageKind.NONE:
        return None
    spec = get_estimator(kind)
    values = dict(params or {})
    if spec.within_group is not None and spec.within_group in values:
        values[spec.within_group] = min(values[spec.within_group], len(rewards))
    with torch.inference_mode():
        r = torch.tensor([list(rewards)], dtype=torch.float64)
        adv = advantages_of(Batch(r, None, False), kind, spec.params_model.model_validate(values))
    assert adv is not None
    return adv[0].tolist()


def _context(
    checked: Checked,
    sim: torch.Tensor,
    ragged: torch.Tensor | None,
    counts: list[list[int]] | None,
    device: torch.device,
) -> MethodContext:
    """What the method's `needs` ask for: answer classes (given answers win; groups without
    answers get the embeddings' components at the method's class_threshold), memory counts."""
    classes = answered = None
    if "classes" in checked.needs:
        threshold = float(checked.params.class_threshold)  # type: ignore[attr-defined]
        classes = similarity_classes(sim, ragged, threshold)
        answered = torch.ones(sim.shape[:2], dtype=torch.bool, device=device)
        for i, answers in enumerate(checked.answers):
            if answers is not None:
                classes[i, : len(answers)] = torch.tensor(answer_labels(answers), device=device)
                answered[i, : len(answers)] = torch.tensor([a is not None for a in answers],
                                                           device=device)
    count_t = None
    if counts is not None:
        count_t = torch.full(sim.shape[:2], -1, dtype=torch.long, device=device)
        for i, c in enumerate(counts):
            count_t[i, : len(c)] = torch.tensor(c, dtype=torch.long, device=device)
    return MethodContext(classes=classes, answered=answered, counts=count_t)


def _all_finite(new: torch.Tensor, adv: torch.Tensor | None, mask: torch.Tensor | None) -> None:
    """Rewards near the float64 range can still overflow (a sum, a square): refuse the group
    rather than answer a NaN or an infinity. `mask`: the valid items (None: all)."""
    if mask is None and all_finite(new) and (adv is None or all_finite(adv)):
        return  # the usual answer: one check each, no mask
    if mask is None:
        mask = torch.ones(new.shape, dtype=torch.bool, device=new.device)
    bad = ~torch.isfinite(new) & mask
    if adv is not None:
        bad |= ~torch.isfinite(adv) & mask
    if bool(bad.any()):
        i = int(bad.any(-1).nonzero()[0])
        raise InvalidInput(
            "values too large to reweight: the result overflows a 64-bit float; "
            "scale the rewards down",
            field=f"groups[{i}].rewards",
        )


def batched_similarity(vectors: list[np.ndarray], g_max: int, dev: torch.device) -> torch.Tensor:
    """[B, G, G] cosine similarities; groups are bucketed by dimension so each bucket is one bmm."""
    b = len(vectors)
    if b and all(v.shape[0] == g_max and v.shape[1] == vectors[0].shape[1] for v in vectors):
        # every group full and of one width (the usual request): one stack, no mask, no scatter
        emb = torch.from_numpy(np.stack(vectors).astype(np.float32, copy=False))
        return batched_cosine(emb.to(dev), None)
    sim = torch.zeros(b, g_max, g_max, dtype=torch.float32, device=dev)
    by_dim: dict[int, list[int]] = {}
    for i, v in enumerate(vectors):
        by_dim.setdefault(v.shape[1], []).append(i)
    for d, idx in by_dim.items():
        emb = torch.zeros(len(idx), g_max, d, dtype=torch.float32)
        mask = torch.zeros(len(idx), g_max, dtype=torch.bool)
        for k, i in enumerate(idx):
            n = vectors[i].shape[0]
            emb[k, :n] = torch.from_numpy(np.ascontiguousarray(vectors[i], dtype=np.float32))
            mask[k, :n] = True
        ragged = None if bool(mask.all()) else mask.to(dev)
        sim[torch.tensor(idx, device=dev)] = batched_cosine(emb.to(dev), ragged)
    return sim
