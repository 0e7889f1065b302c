"""Fairness between tenants: who anchors a round, each tenant's part of it, and how big a round
may be while several tenants are around.

Tenants (reweighter.tenancy; no job can starve another): with requests of several tenants
pending, the tenants share the encoder by weight first, then a tenant's requests share its part
by the rule of the package (anchor, fill, tail). The worker keeps each active tenant's virtual
time (tokens it was served / its weight, a tenant that becomes active starting at the least of
the others', as in start-time fair queueing) and passes it in as `shares`. The tenant with the
least virtual time anchors the round (its least recently served request), and the fill first
takes from each tenant at most its weighted part of the round's tokens (`TenantPart.part`);
only then, work-conserving, whatever pads least from anyone. When the anchor's tenant is served
whole by the round (a light job's small request), the others add only their weighted part
relative to what it takes, none of it padding (`short_round_parts`), and the round ends: short,
so the light job waits for the round in progress and one short round, however many requests
another tenant floods in. Two backlogged tenants' tokens split by weight. With one tenant
(every single-key or open service) none of this applies: the rule alone.

The round in progress. A request that arrives waits for the round being computed (a round is
one forward pass on CPU: it cannot be cut), so while several tenants are around a round is one
slice (`round_budget`: `slice_tokens`, the size in which a small request is served whole), and
a light job's request waits for one slice of another job's work, not four. "Around" is
`tenants_around`: a tenant with work now, or with work in the last `LINGER_ROUNDS` rounds,
since a job's next request comes a moment after its last answer, while the round planned at
that answer is already running. The cost is the flood's: more, smaller passes, paid only while
another tenant is around (measured within the noise on CPU, BENCHMARKS.md); a service with one
tenant never pays it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reweighter.embedding.base import Budget
from reweighter.embedding.plan.index import Views, has_work
from reweighter.embedding.plan.pending import (
    PendingJob,
    PendingRequest,
    R,
    RoundBudget,
    tenant_of,
    weight_of,
)

LINGER_ROUNDS = 16
"""Rounds a tenant still counts as around after its last request was live (see the module).
Why 16: a job sends its next request a client round trip after its last answer; with 2, a
light job measured under a flood dropped out of "around" in between, met a full round on its
return and its p95 stayed at 1.0-1.7 s; with 16 it was 0.46-0.69 s, the flood's throughput
unchanged (CPU, load 2.5; BENCHMARKS.md, Tenants). One-slice rounds are ~0.1 s on 2 CPU cores
and tens of ms on a GPU, so 16 of them are well above any round trip on loopback or a LAN."""


def tenants_around(last_live: Mapping[str, int], round_: int, linger: int = LINGER_ROUNDS) -> int:
    """How many tenants are around for round `round_` (rounds are numbered by the worker):
    those whose requests were live at most `linger` rounds before it. `last_live`: tenant ->
    the last round it had a live request in (`round_` itself when it has one now)."""
    return sum(1 for last in last_live.values() if round_ - last <= linger)


def round_budget(budget: RoundBudget, tenants: int) -> RoundBudget:
    """The bound of the next round with `tenants` tenants around: `budget` itself for one (or
    none); for two or more, one slice of padded tokens (never above the budget), whatever
    their number. Why: a request waits for the round in progress, which nothing can cut
    short; one-slice rounds while several jobs share the encoder bound that wait by one slice
    of work (a small request still fits whole in the round it anchors), and a job alone keeps
    its full rounds. Measured on CPU (2 cores shared, load 4-6; BENCHMARKS.md, "Tenants:
    the round in progress"): between the machine's load bursts a light job's request under a
    flood took 0.13-0.22 s with one-slice rounds, 0.25-0.29 s with half rounds, mostly
    0.7-1.7 s with full ones, the flood's throughput within the noise."""
    if tenants < 2:
        return budget
    tokens = min(budget.batch.tokens, budget.slice_tokens)
    return RoundBudget(Budget(tokens, budget.batch.rows), budget.slice_tokens)


@dataclass(frozen=True)
class TenantPart:
    """A tenant with schedulable work, as the next round sees it."""

    part: float  # its weighted part of the round's tokens
    first: int  # the rotation rank of its first request with work
    weight: float


def tenant_parts(
    order: Sequence[PendingRequest], budget: RoundBudget, shares: Mapping[str, float]
) -> dict[str, TenantPart] | None:
    """Per tenant with schedulable work (requests in rotation `order`), its part; None when one
    tenant (or none) has work: the rule alone, no parts."""
    weights: dict[str, float] = {}
    first: dict[str, int] = {}
    for rank, req in enumerate(order):
        t = tenant_of(req)
        if t in weights:
            continue
        if has_work(req):
            weights[t] = max(weight_of(req), 1e-9)
            first[t] = rank
    if len(weights) < 2:
        return None
    total = sum(weights.values())
    return {t: TenantPart(budget.batch.tokens * w / total, first[t], w) for t, w in weights.items()}


def anchor_tenant(tenants: Mapping[str, TenantPart], shares: Mapping[str, float]) -> str:
    """The tenant with the least virtual time (absent: 0); among equals, the one whose request
    comes first in rotation."""
    return min(tenants, key=lambda t: (shares.get(t, 0.0), tenants[t].first))


def anchor_tenant_first(order: Sequence[R], tenant: str) -> list[R]:
    """The rotation with `tenant`'s requests first (each side in rotation order), so that its
    least recently served request anchors the round and wins ties in the fill."""
    return [r for r in order if tenant_of(r) == tenant] + [
        r for r in order if tenant_of(r) != tenant
    ]


def tenant_left(views: Views, tenant: str, at: Callable[[PendingJob], int]) -> bool:
    """Whether `tenant` has work the round (its cursor `at`) did not take. Reads the indices:
    one entry per schedulable text."""
    for req, ix in zip(views.order, views.ixs, strict=True):
        if tenant_of(req) != tenant:
            continue
        for e in ix.entries:
            job = ix.job(e)
            if job is not None and at(job) < len(job.pieces):  # type: ignore[arg-type]
                return True
    return False


def parts(tenants: Mapping[str, TenantPart]) -> dict[str, float]:
    """Tenant -> its weighted part of the round's tokens: what the fill takes first."""
    return {t: p.part for t, p in tenants.items()}


def short_round_parts(
    tenants: Mapping[str, TenantPart], anchor: str, used: Mapping[str, int]
) -> dict[str, float]:
    """The round's parts when the anchor's tenant is served whole by it: every tenant's weighted
    part relative to what the anchor's tenant takes (the anchor's own part: what it has)."""
    took, w = used.get(anchor, 0), tenants[anchor].weight
    return {t: took * p.weight / w for t, p in tenants.items()}
