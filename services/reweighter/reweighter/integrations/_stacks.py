"""What the stack adapters (TRL, slime, SkyRL, verl) share: "reweight a flat batch whose groups
are given by a key" (their options are integrations/options.py's ReweighterOptions).

The stacks hand over flat lists (one entry per completion) tagged with a group key; the service
wants groups. `reweight_by_key` does that regrouping once, in one call, and scatters the answers
back to the flat order, so each adapter stays a few lines of field mapping. Clients come from
`reweighter.client.connect` and nowhere else.

Member order: inside a group, members are sent in the order of the stack's own per-sample index
(`order`: slime's Sample.index, SkyRL's repetition_id, TRL's generation index), so the request
is the same whichever order the stack's batch arrived in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import Reweighter
from ..types import DEFAULT_METHOD, Group, ReweightRequest, ReweightResult


def prompt_key(prompt: Any) -> str:
    """A stable key of a prompt across steps (outcome_ucb's memory) where a stack gives no
    stable id: the SHA-256 of its text (a chat prompt as canonical JSON)."""
    raw = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()


def answer_or_none(value: Any) -> str | None:
    """A stack's answer field as the wire takes it: a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Reweighted:
    """A flat batch's answer, in the batch's order."""

    rewards: list[float]
    advantages: list[float] | None
    mean_similarity: list[float]
    """Each completion's group statistic (the same value for every member of a group)."""
    groups: int
    request: ReweightRequest | None = None
    result: ReweightResult | None = None
    members: list[list[int]] = field(default_factory=list)
    """Each group's batch positions, in the order they were sent."""


def reweight_by_key(
    backend: Reweighter,
    keys: Sequence[Hashable],
    rewards: Sequence[float],
    completions: Sequence[str],
    *,
    order: Sequence[Any] | None = None,
    method: str = str(DEFAULT_METHOD),
    params: Mapping[str, Any] | None = None,
    advantages: str = "none",
    answers: Sequence[str | None] | None = None,
    prompt_keys: Sequence[str | None] | None = None,
    step: int | None = None,
    advantage_params: Mapping[str, Any] | None = None,
    quality: Sequence[float] | None = None,
) -> Reweighted:
    """Reweight a flat batch in ONE call; completions with equal keys form a group.

    Inside a group, members are sorted by `order` (the stack's per-sample index; ties and
    `order=None` keep batch order); groups keep the order of their first member, and a string
    key is the group's id. The answer is scattered back to the batch's positions.

    `answers` (per completion: its extracted final answer or None) and `prompt_keys` (per
    completion; a group takes its first member's) go with the groups when the stack has them
    (darling's classes, outcome_ucb's memory, `stats.distinct_answers`); `step` (the trainer's
    global step) and `advantage_params` (pass_at_k's k) with the request. `quality` (per
    completion: the quality part of its reward) goes with the groups: the method reweights only
    it and adds the rest back (docs/methods.md).
    """
    n = len(keys)
    for name, values in (("answers", answers), ("prompt_keys", prompt_keys), ("quality", quality)):
        if values is not None and len(values) != n:
            raise ValueError(f"{name}: {len(values)} given for {n} completions")
    if not n == len(rewards) == len(completions) == (n if order is None else len(order)):
        raise ValueError(
            f"keys, rewards, completions (and order) differ in length: {n}, {len(rewards)}, "
            f"{len(completions)}" + ("" if order is None else f", {len(order)}")
        )
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    if order is not None:
        for idx in members.values():
            idx.sort(key=lambda i: order[i])  # stable: equal indices keep batch order
    if not members:
        return Reweighted([], [] if advantages != "none" else None, [], 0)
    request = ReweightRequest(
        groups=[
            Group(
                rewards=[float(rewards[i]) for i in idx],
                completions=[completions[i] for i in idx],
                id=key if isinstance(key, str) else str(g),
                answers=None if answers is None else [answers[i] for i in idx],
                prompt_key=None if prompt_keys is None else prompt_keys[idx[0]],
                quality=None if quality is None else [float(quality[i]) for i in idx],
            )
            for g, (key, idx) in enumerate(members.items())
        ],
        method=method,
        params=dict(params or {}),
        advantages=advantages,  # type: ignore[arg-type]
        advantage_params=dict(advantage_params or {}),
        step=step,
    )
    result = backend.reweight(request)
    want_adv = advantages != "none"
    if len(result.groups) != len(members) or any(
        len(r.rewards) != len(idx)
        or (want_adv and (r.advantages is None or len(r.advantages) != len(idx)))
        for r, idx in zip(result.groups, members.values(), strict=False)
    ):
        raise RuntimeError(
            f"the reweighter answered {[len(r.rewards) for r in result.groups]} rewards for "
            f"groups of {[len(idx) for idx in members.values()]}"
        )
    out = [0.0] * n
    adv: list[float] | None = [0.0] * n if want_adv else None
    sim = [0.0] * n
    for idx, group in zip(members.values(), result.groups, strict=True):
        for j, i in enumerate(idx):
            out[i] = group.rewards[j]
            sim[i] = group.stats.mean_similarity
            if adv is not None:
                adv[i] = group.advantages[j]  # type: ignore[index]  (checked above)
    return Reweighted(out, adv, sim, len(members), request, result, list(members.values()))
