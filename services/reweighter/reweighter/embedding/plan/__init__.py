"""The batcher's policy: which pieces the next round computes, as one pure function.

`plan(pending, budget, shares)` reads the pending requests (their texts' pieces and how far
each text has been scheduled) and returns the round as typed ranges; it changes nothing. The
batcher's worker applies the round (advances the cursors, marks who was served) and runs it.
Why apart: the rule is the product's fairness promise (no client can starve another), so it is
tested without threads, models or clocks (tests/embedding/test_plan.py), as infinity keeps its
`pop_optimal_batches` apart from its worker.

The rule. A round is bounded by `budget.batch` (rows x longest piece, as a forward pass is).
The least recently served request anchors it: whole, when at most `budget.slice_tokens` of it
is left, else its longest next piece. The rest of the round is filled, one piece at a time,
with whichever pending piece pads least against it (older requests first among equals); when
everything pending then fits within `Budget.fits_with_tail`, the round takes it all. With
several tenants, the tenants share the round by weight first (fairness.py).

One algorithm. The fill reads each request's `LengthIndex` (kept by the worker) by bisection
from the round's longest, for one tenant and many: a round costs what it takes, not what is
queued. The scan it replaced (every queued text read each round) is the tests' oracle
(tests/embedding/plan_oracle.py): the same rounds on random workloads of one tenant and several.

The rooms: `pending` (what the planner reads and returns), `fairness` (tenants: who anchors,
their parts, the round's bound while several are around), `index` (the length index and the
fill's view of it), `packing` (a round: the anchor, the fill, the tail).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reweighter.embedding.plan.fairness import (
    LINGER_ROUNDS,
    TenantPart,
    anchor_tenant,
    anchor_tenant_first,
    parts,
    round_budget,
    short_round_parts,
    tenant_left,
    tenant_parts,
    tenants_around,
)
from reweighter.embedding.plan.index import LengthIndex, Views, index_of
from reweighter.embedding.plan.packing import Round, anchor_round, fill, take_tail
from reweighter.embedding.plan.pending import (
    DEFAULT_TENANT,
    PendingJob,
    PendingRequest,
    R,
    Range,
    RoundBudget,
    Slice,
    schedulable,
    tenant_of,
    weight_of,
)

__all__ = [
    "DEFAULT_TENANT",
    "LINGER_ROUNDS",
    "LengthIndex",
    "PendingJob",
    "PendingRequest",
    "Range",
    "RoundBudget",
    "Slice",
    "plan",
    "round_budget",
    "schedulable",
    "tenant_of",
    "tenants_around",
    "weight_of",
]


def plan(
    pending: Sequence[R], budget: RoundBudget, shares: Mapping[str, float] | None = None
) -> list[Slice[R, PendingJob]]:
    """The next round over the live `pending` requests, per request in rotation order; empty when
    nothing is schedulable. Pure: reads `pending` (and `shares`: each tenant's virtual time,
    absent = 0), returns ranges.

    Why not a slice from every request in turn: each request hands over its own longest texts,
    and eight requests' longest texts differ, so every round padded to the longest of a mixed
    set (padding efficiency 0.93 against 0.99 for one global sort); and a request alone got
    only its slice per round, a quarter of a pass (128 texts in one request ran in 57 passes
    where a global sort needs 13). Fairness stays with the anchor: a request not served in a
    round moves ahead of every request that was, so it anchors a round within as many rounds
    as there are active requests (in practice the next one or two: the fill serves most
    requests every round), and a newcomer anchors the very next round.
    """
    # Least recently served first (never served: first), then arrival order.
    order = sorted(pending, key=lambda r: (r.turn, r.seq))
    tenants = tenant_parts(order, budget, shares or {})
    first = None if tenants is None else anchor_tenant(tenants, shares or {})
    if first is not None:
        order = anchor_tenant_first(order, first)
    ixs = [index_of(r) for r in order]
    rnd = Round(budget.batch)
    anchor_round(rnd, order, ixs, budget.slice_tokens)
    if rnd.count and not rnd.full:
        views = Views(order, ixs, rnd.taken)
        if tenants is None or first is None:  # one tenant: the rule alone
            fill(rnd, views)
            take_tail(rnd, views)
        else:
            _fill_by_tenant(rnd, views, tenants, first)
    return rnd.slices()


def _fill_by_tenant(
    rnd: Round, views: Views, tenants: Mapping[str, TenantPart], first: str
) -> None:
    """The fill with several tenants: each tenant's weighted part first, then work-conserving
    (and the tail); when the anchor's tenant is served whole by this round (a light job's
    request), the others add their weighted part relative to what it takes and the round ends
    there, short, so the light job is answered after a short round, not a full one."""
    if not tenant_left(views, first, rnd.at):
        fill(rnd, views, short_round_parts(tenants, first, rnd.used), pad=False)
        return
    fill(rnd, views, parts(tenants))
    if not rnd.full:
        fill(rnd, views)
    take_tail(rnd, views)
