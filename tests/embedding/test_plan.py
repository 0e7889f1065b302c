"""The batcher's policy, `plan(pending, budget)`, without threads, models or clocks.

Every expected round is computed by hand from the rule in reweighter/embedding/plan/ (anchor,
fill, tail; tenants' parts) and written out piece by piece; the pieces are plain token counts.
Then, on random workloads of one tenant and several, the planner (length indices, bisection)
against the scan it replaced (plan_oracle.py): round after round, the same ranges.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

import pytest

from reweighter.embedding.base import Budget, Piece
from reweighter.embedding.plan import (
    LINGER_ROUNDS,
    LengthIndex,
    Range,
    RoundBudget,
    Slice,
    plan,
    round_budget,
    schedulable,
    tenants_around,
)

from . import plan_oracle


@dataclass(eq=False)
class J:
    """A text in flight as the policy sees it (PendingJob)."""

    tokens: list[int]
    scheduled: int = 0
    finished: bool = False
    pieces: list[Piece] | None = None

    def __post_init__(self) -> None:
        if self.pieces is None:
            self.pieces = [Piece(0, n, None) for n in self.tokens]


@dataclass(eq=False)
class Req:
    """A request as the policy sees it (PendingRequest)."""

    jobs: list[J]
    seq: int
    turn: int = -1
    extra: dict = field(default_factory=dict)


def budget(tokens: int, rows: int = 64, slice_tokens: int = 1) -> RoundBudget:
    return RoundBudget(Budget(tokens, rows), slice_tokens)


def taken(round_: list[Slice]) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """(request seq, [(piece tokens of the job's first piece, start, end), ...]) per slice."""
    return [(s.request.seq, [(r.job.tokens[0], r.start, r.end) for r in s.ranges]) for s in round_]


def test_a_small_request_anchors_whole_then_the_fill_and_the_tail() -> None:
    """r1 has 30 tokens left (= the slice): whole, longest first (b, then a). Count 2, longest
    20. The fill adds c's 20-token windows while 20 x rows <= 100: rows 3, 4, 5; a 6th would
    be 120. With 5 windows, the tail (2 more: 7 x 20 = 140 > 125) is not taken; with 4, one
    more row makes 6 x 20 = 120 <= 125: the tail is taken and nothing is left."""
    a, b = J([10]), J([20])
    c5 = J([21] + [20] * 4)  # first window marks the job in `taken`; 21 > 20: longest 21
    r1, r2 = Req([a, b], seq=1), Req([c5], seq=2)
    got = plan([r1, r2], budget(100, slice_tokens=30))
    # anchor b(20), a(10); fill: c5's 21 pads 2 x 1 = 2 -> in (longest 21); then 20s: 4 x 21
    # = 84, 5 x 21 = 105 > 100: full after 2 of c5's windows.
    assert taken(got) == [(1, [(20, 0, 1), (10, 0, 1)]), (2, [(21, 0, 2)])]

    c = J([20] * 5)
    got = plan([Req([a, b], seq=1), Req([c], seq=2)], budget(100, slice_tokens=30))
    assert taken(got) == [(1, [(20, 0, 1), (10, 0, 1)]), (2, [(20, 0, 3)])]
    c4 = J([20] * 4)
    got = plan([Req([a, b], seq=1), Req([c4], seq=2)], budget(100, slice_tokens=30))
    assert taken(got) == [(1, [(20, 0, 1), (10, 0, 1)]), (2, [(20, 0, 4)])]  # the tail


def test_a_large_request_anchors_with_its_longest_piece_only() -> None:
    """50 tokens left > slice 30: the anchor is the longest next piece (y, 40); x (10) would
    need 2 x 40 = 80 > 60 padded tokens: the round is y alone."""
    x, y = J([10]), J([40])
    got = plan([Req([x, y], seq=1)], budget(60, slice_tokens=30))
    assert taken(got) == [(1, [(40, 0, 1)])]
    got = plan([Req([x, y], seq=1)], budget(80, slice_tokens=30))  # 2 x 40 fits: the fill
    assert taken(got) == [(1, [(40, 0, 1), (10, 0, 1)])]


def test_the_fill_takes_what_pads_least() -> None:
    """Anchor x (50). Candidates q 48 (wastes 2), s 60 (pads 1 row by 10), p 10+10 (wastes
    40). q first; then s (2 x 10 = 20 < 40); then p: 4 x 60 = 240 > 200, full. Tail: 3 rows +
    p's 2 = 5 x 60 = 300 > 250: not taken."""
    x, p, q, s = J([50]), J([10, 10]), J([48]), J([60])
    got = plan([Req([x], seq=1), Req([p, q, s], seq=2)], budget(200, slice_tokens=50))
    assert taken(got) == [(1, [(50, 0, 1)]), (2, [(48, 0, 1), (60, 0, 1)])]


def test_rotation_least_recently_served_then_arrival() -> None:
    """One piece per round (rows=1): the anchor alone. A never-served request goes first;
    then the least recently served; equal turns by arrival."""
    old, recent, new = J([5]), J([5]), J([5])
    reqs = [Req([old], seq=1, turn=2), Req([recent], seq=2, turn=3), Req([new], seq=3)]
    assert taken(plan(reqs, budget(100, rows=1))) == [(3, [(5, 0, 1)])]
    reqs[2].turn = 4
    assert taken(plan(reqs, budget(100, rows=1))) == [(1, [(5, 0, 1)])]
    reqs[0].turn = reqs[1].turn = 3
    assert taken(plan(reqs, budget(100, rows=1))) == [(1, [(5, 0, 1)])]


def test_plan_changes_nothing_and_resumes_at_the_cursor() -> None:
    """Pure: the jobs and requests are as they were; a job's cursor says where the next round
    starts; finished or unsplit jobs are never taken; no work, no round."""
    done, unsplit = J([30], finished=True), J([7])
    unsplit.pieces = None
    half = J([10, 10, 10], scheduled=2)
    reqs = [Req([done, unsplit, half], seq=1, turn=4)]
    before = copy.deepcopy([(j.scheduled, j.finished, j.pieces) for j in reqs[0].jobs])
    got = plan(reqs, budget(100, slice_tokens=100))
    assert got == [Slice(reqs[0], (Range(half, 2, 3),))]
    assert [(j.scheduled, j.finished, j.pieces) for j in reqs[0].jobs] == before
    assert reqs[0].turn == 4
    assert plan([Req([done], seq=2)], budget(100)) == []
    assert plan([], budget(100)) == []


def test_a_text_shared_by_two_requests_is_taken_once() -> None:
    shared = J([20, 20])
    got = plan([Req([shared], seq=1), Req([J([5]), shared], seq=2)], budget(1000, slice_tokens=100))
    assert taken(got) == [(1, [(20, 0, 2)]), (2, [(5, 0, 1)])]


def test_the_tail_check_reads_a_huge_text_only_as_far_as_a_round() -> None:
    """A 4 MB completion is ~5,000 windows; every round asks whether all that is pending fits
    in it. The answer must not cost a pass over every window per round: a quadratic version
    stalled each round for seconds (a small request beside a 4 MB one waited 7 s instead of
    0.6 s; bench_first_contact --fairness-only). (Moved here from test_batcher.py with the
    round builder it tested.) Anchor 1 window, fill to 8 x 256 = 2048; the tail would need
    2,992 more rows: 11 x 256 > 2560 stops it after reading 3."""

    class Counted(list):
        reads = 0

        def __getitem__(self, k):  # noqa: ANN001, ANN204 - list's own signature
            Counted.reads += 1
            return super().__getitem__(k)

    job = J([], pieces=Counted(Piece(0, 256, None) for _ in range(3_000)))
    Counted.reads = 0
    got = plan([Req([job], seq=1)], RoundBudget(Budget(2048, 4096), 1))
    assert got == [Slice(got[0].request, (Range(job, 0, 8),))]
    assert Counted.reads <= 64  # the round's own 8 pieces, a few times over, not 3,000
    assert job.scheduled == 0


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_the_row_bound_holds(rows: int) -> None:
    jobs = [J([1]) for _ in range(10)]
    got = plan([Req(jobs, seq=1)], budget(10_000, rows=rows, slice_tokens=10_000))
    assert sum(r.end - r.start for s in got for r in s.ranges) == rows


# -- tenants: shares by weight first, then the rule above within a tenant ----------------------


@dataclass(eq=False)
class TReq(Req):
    """A request of a tenant (PendingRequest's optional `tenant` and `weight`)."""

    tenant: str = "default"
    weight: float = 1.0


def tokens_of(round_: list[Slice]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in round_:
        for r in s.ranges:
            out[s.request.tenant] = out.get(s.request.tenant, 0) + 10 * (r.end - r.start)
    return out


def test_one_tenant_plans_exactly_as_without_tenants() -> None:
    """The single-key or open service: requests of the one tenant "default" (or all of one
    named tenant) give the very round the rule gives without tenant attributes."""

    def reqs(cls, **kw):  # noqa: ANN001, ANN202, ANN003
        return [cls([J([10, 20]), J([30])], seq=1, **kw), cls([J([25] * 6)], seq=2, **kw)]

    plain = taken(plan(reqs(Req), budget(120, slice_tokens=30)))
    assert taken(plan(reqs(TReq, tenant="team-a"), budget(120, slice_tokens=30))) == plain
    assert taken(plan(reqs(TReq), budget(120, slice_tokens=30), {"default": 5.0})) == plain


def test_the_tenant_with_least_service_per_weight_anchors() -> None:
    """rows=1: the anchor alone. Without shares the older request anchors (team-a's); with
    team-a's virtual time ahead, team-b's request anchors though it came later."""
    a, b = TReq([J([5])], seq=1, tenant="team-a"), TReq([J([5])], seq=2, tenant="team-b")
    assert taken(plan([a, b], budget(100, rows=1))) == [(1, [(5, 0, 1)])]
    got = plan([a, b], budget(100, rows=1), {"team-a": 50.0, "team-b": 10.0})
    assert taken(got) == [(2, [(5, 0, 1)])]


def test_two_backlogged_tenants_split_a_round_by_weight() -> None:
    """120 padded tokens of 10-token pieces: 12 rows. Weights 3:1 -> parts of 90 and 30
    tokens: the flood tenant (weight 3, many requests) gets 9 rows, the other 3, whatever
    the flood's request count; with equal weights 6 and 6."""

    def flood(w: float) -> list[TReq]:
        return [TReq([J([10] * 8)], seq=i, tenant="flood", weight=w) for i in range(1, 9)]

    light = TReq([J([10] * 8)], seq=20, tenant="light", turn=0)
    shares = {"flood": 0.0, "light": 0.0}
    got = plan([*flood(3.0), light], budget(120, slice_tokens=10), shares)
    assert tokens_of(got) == {"flood": 90, "light": 30}
    got = plan([*flood(1.0), light], budget(120, slice_tokens=10), shares)
    assert tokens_of(got) == {"flood": 60, "light": 60}


def test_a_light_tenant_served_whole_gets_a_short_round() -> None:
    """The light tenant's request (2 pieces, 20 tokens) is all it has: it anchors, the flood
    (weight 2) adds twice its tokens (4 pieces, none longer than the light's: no padding) and
    the round ends there (not 12 rows), so the light job's answer waits for a short round."""
    flood = [TReq([J([40]), J([10] * 8)], seq=i, tenant="flood", weight=2.0, turn=1)
             for i in range(1, 6)]  # fmt: skip
    light = TReq([J([10]), J([10])], seq=9, tenant="light")
    got = plan([*flood, light], budget(120, slice_tokens=30), {"flood": 5.0, "light": 5.0})
    assert tokens_of(got) == {"light": 20, "flood": 40}
    assert got[0].request is light


# -- the round in progress: smaller rounds while several tenants are around ------------------


def test_tenants_around_counts_work_now_and_in_the_last_rounds() -> None:
    """Round 10 is next. a has a request now (10), b had one in round 8 (2 rounds ago: around
    with a linger of 2), c in round 7 (3 ago: gone with a linger of 2, around with 3). The
    default linger, 16 rounds, keeps a job whose next request is a client round trip away
    around (measured: with 2 a light job dropped out between its requests, BENCHMARKS.md)."""
    last = {"a": 10, "b": 8, "c": 7}
    assert LINGER_ROUNDS == 16
    assert tenants_around(last, 10) == 3
    assert tenants_around(last, 10, linger=2) == 2
    assert tenants_around(last, 10, linger=3) == 3
    assert tenants_around(last, 10, linger=0) == 1
    assert tenants_around({"b": 8}, 25) == 0  # 17 rounds ago: gone
    assert tenants_around({}, 1) == 0


def test_round_budget_is_one_slice_while_several_tenants_are_around() -> None:
    """2,048 tokens, slice 512: one tenant (or none) keeps 2,048; two, three or ten get one
    slice, 512. Rows are left alone; a budget smaller than a slice is never raised."""
    full = budget(2048, rows=64, slice_tokens=512)
    assert round_budget(full, 0) == full and round_budget(full, 1) == full
    assert round_budget(full, 2) == budget(512, rows=64, slice_tokens=512)
    assert round_budget(full, 3) == round_budget(full, 10) == round_budget(full, 2)
    small = budget(300, rows=8, slice_tokens=512)
    assert round_budget(small, 4) == small


def test_the_flood_beside_a_tenant_around_runs_one_slice_rounds() -> None:
    """The flood alone (8 requests of 10-token pieces), round budget 120: 12 rows. With the
    light tenant around but nothing pending (its request just answered), the round is planned
    with round_budget(.., 2): one slice, 30 tokens, 3 rows; the rule inside a round is
    unchanged."""
    flood = [TReq([J([10] * 8)], seq=i, tenant="flood", turn=1) for i in range(1, 9)]
    full = budget(120, slice_tokens=30)
    assert sum(tokens_of(plan(flood, full)).values()) == 120
    assert tokens_of(plan(flood, round_budget(full, 2))) == {"flood": 30}


def test_a_light_request_is_whole_in_a_one_slice_round() -> None:
    """The light tenant's request (3 pieces of 10 = its slice, 30) anchors the one-slice round
    whole: the round is full with it and the flood adds nothing. A light request of 2 pieces
    leaves one row (30 tokens hold 3 rows of 10): the flood's part of equal weight (20, no
    padding) is cut to that row by the round's room."""
    flood = [TReq([J([10] * 8)], seq=i, tenant="flood", turn=1) for i in range(1, 9)]
    shares = {"flood": 5.0, "light": 5.0 - 1e-9}
    one = round_budget(budget(120, slice_tokens=30), 2)
    light = TReq([J([10]), J([10]), J([10])], seq=9, tenant="light")
    got = plan([*flood, light], one, shares)
    assert got[0].request is light and tokens_of(got) == {"light": 30}
    light = TReq([J([10]), J([10])], seq=9, tenant="light")
    got = plan([*flood, light], one, shares)
    assert got[0].request is light and tokens_of(got) == {"light": 20, "flood": 10}


# -- the planner against the scan (the oracle), on random workloads --------------------------


def _workload(rng: random.Random, most: int) -> list[Req]:
    """Requests of mixed sizes and lengths: single pieces, long texts of many windows, texts
    shared between requests, texts not split yet; at most `most` texts in all."""
    reqs: list[Req] = []
    pool: list[J] = []
    for seq in range(rng.randint(1, 12)):
        jobs: list[J] = []
        for _ in range(min(rng.choice([1, 2, 4, 16, 64, 200]), most - len(pool))):
            if pool and rng.random() < 0.05:
                shared = rng.choice(pool)
                if shared not in jobs:
                    jobs.append(shared)
                continue
            windows = [rng.choice([64, 256])] * rng.randint(0, 4) if rng.random() < 0.15 else []
            job = J([*windows, rng.randint(1, 256)])
            if rng.random() < 0.03:
                job.pieces = None  # still being split
            jobs.append(job)
            pool.append(job)
        if jobs:
            reqs.append(Req(jobs, seq=seq))
    return reqs


def _tenants(rng: random.Random, reqs: list[Req]) -> list[TReq]:
    """The same workload as requests of 2-4 tenants of random weights (a tenant's requests
    share its weight, as the service's keys give it)."""
    names = ["t0", "t1", "t2", "t3"][: rng.randint(2, 4)]
    weights = {t: rng.choice([0.5, 1.0, 1.0, 2.0, 3.0]) for t in names}
    out = []
    for r in reqs:
        # a light job's requests are small (a group or two): served whole, short rounds
        t = names[0] if len(r.jobs) <= 4 and rng.random() < 0.5 else rng.choice(names)
        out.append(TReq(r.jobs, seq=r.seq, tenant=t, weight=weights[t]))
    return out


class _Worker:
    """The batcher's worker as far as the planner sees it: indices built on arrival and moved
    per round, texts held by several requests marked (on odd seeds), tenants' virtual times
    (`DynamicBatcher._shares`) and the round's bound while several are around
    (`_round_budget`). Requests arrive at the round `arrive` gives (0: at the start)."""

    def __init__(
        self, reqs: list, arrive: dict[int, int], b: RoundBudget, mark: bool, one_slice: bool
    ) -> None:
        self.waiting, self.arrive, self.b, self.mark = list(reqs), arrive, b, mark
        self.one_slice = one_slice
        self.active: list = []
        self.holders: dict[int, list] = {}
        self.vtime: dict[str, float] = {}
        self.last_live: dict[str, int] = {}
        self.round = 0
        self.unsplit = [j for r in reqs for j in r.jobs if j.pieces is None]
        self.rounds = self.shared_rounds = 0

    def admit(self) -> None:
        for r in [r for r in self.waiting if self.arrive[r.seq] <= self.round]:
            self.waiting.remove(r)
            r.length_index = LengthIndex(r.jobs)
            for j in r.jobs:
                self.holders.setdefault(id(j), []).append(r)
            self.active.append(r)
        if self.mark:
            for r in self.active:
                r.length_index.shared = {id(j) for j in r.jobs if len(self.holders[id(j)]) > 1}

    def shares(self) -> dict[str, float] | None:
        tenants = {getattr(r, "tenant", "default") for r in self.active}
        if len(tenants) < 2:
            self.vtime = {}
            return None
        for t in [t for t in self.vtime if t not in tenants]:
            del self.vtime[t]
        served = {r.tenant for r in self.active if r.turn >= 0}
        floor = min(self.vtime.values(), default=0.0)
        for t in [t for t in tenants if t not in self.vtime]:
            self.vtime[t] = floor if t in served else floor - 1e-9
        return self.vtime

    def budget(self) -> RoundBudget:
        upcoming = self.round + 1
        for r in self.active:
            self.last_live[getattr(r, "tenant", "default")] = upcoming
        if not self.one_slice:  # the planner's rule under any bound: full rounds too
            return self.b
        return round_budget(self.b, tenants_around(self.last_live, upcoming))

    def apply(self, got: list[Slice]) -> None:
        self.round += 1
        self.rounds += 1
        self.shared_rounds += len({getattr(s.request, "tenant", "") for s in got}) > 1
        for s in got:
            req = s.request
            if self.vtime:
                tokens = sum(p.tokens for rg in s.ranges for p in rg.job.pieces[rg.start : rg.end])
                self.vtime[req.tenant] = self.vtime.get(req.tenant, 0.0) + tokens / req.weight
            for rg in s.ranges:
                was, rg.job.scheduled = rg.job.scheduled, rg.end
                for r in self.holders[id(rg.job)]:
                    r.length_index.moved(rg.job, was)
            req.turn = self.round

    def split_one(self) -> bool:
        """Nothing to plan: the next text's pieces arrive, or the next request; False at the
        end."""
        if self.unsplit:
            job = self.unsplit.pop()  # its pieces arrive: the worker indexes it in its holders
            job.pieces = [Piece(0, n, None) for n in job.tokens]
            for r in self.holders.get(id(job), ()):
                r.length_index.add(job)
            return True
        if self.waiting:
            self.round = min(self.arrive[r.seq] for r in self.waiting)
            return True
        return False


def serve_against_the_oracle(
    reqs: list, b: RoundBudget, arrive: dict[int, int], mark: bool, one_slice: bool = True
) -> _Worker:
    """Plan round after round with the planner and the oracle until all is served; every round
    must be the same (ranges, their order, the requests they were taken for)."""
    w = _Worker(reqs, arrive, b, mark, one_slice)
    while True:
        w.admit()
        shares, rb = w.shares(), w.budget()
        want = plan_oracle.plan(w.active, rb, shares)
        got = plan(w.active, rb, shares)
        assert taken(got) == taken(want)
        assert [s.request for s in got] == [s.request for s in want]
        if not got:
            if not w.split_one():
                break
            continue
        w.apply(got)
        for r in w.active:  # the index stays exact: one entry per schedulable text
            assert r.length_index.entries == LengthIndex(r.jobs).entries
        w.active = [r for r in w.active if any(schedulable(j) or j.pieces is None for j in r.jobs)]
    assert all(j.scheduled == len(j.pieces) for r in reqs for j in r.jobs if j.pieces)
    return w


def random_case(seed: int, tenants: bool) -> tuple[list, RoundBudget, dict[int, int], bool, bool]:
    """Seed -> a workload, its budget, arrivals, whether shared texts are marked and whether
    rounds are one slice while several tenants are around (as the worker bounds them; else
    the full budget, so that the tenants' parts bind). Budgets from a CPU's (one-pass rounds)
    to a GPU's. (The scan's fill looks at the first max(256, 4 x rows) queued texts only, the
    index at all of them: the workloads stay within that bound, where the two must agree.)"""
    rng = random.Random(seed)
    rows = rng.choice([4, 64, 4096])
    reqs: list = _workload(rng, max(256, 4 * min(rows, 1024)))
    slice_tokens = rng.choice([1, 256, 512, 4096])
    b = RoundBudget(Budget(rng.choice([512, 2048, 8192, 65536]), rows), slice_tokens)
    arrive = {r.seq: 0 for r in reqs}
    if not tenants:
        return reqs, b, arrive, seed % 2 == 1, True
    reqs = _tenants(rng, reqs)
    arrive = {r.seq: rng.choice([0, 0, rng.randint(1, 8)]) for r in reqs}
    return reqs, b, arrive, seed % 2 == 1, rng.random() < 0.5


@pytest.mark.parametrize("seed", range(40))
def test_one_tenant_the_planner_takes_the_rounds_the_scan_takes(seed: int) -> None:
    """With one tenant (every single-key or open service), all requests queued at once."""
    serve_against_the_oracle(*random_case(seed, tenants=False))


@pytest.mark.parametrize("seed", [*range(40), 192, 225, 1243])
def test_several_tenants_the_planner_takes_the_rounds_the_scan_takes(seed: int) -> None:
    """2-4 tenants of random weights, requests arriving over the first rounds: the tenants'
    virtual times and one-slice rounds while several are around, as the worker keeps them.
    Seeds 192, 225 and 1243 (of the 1,460 checked once) are the ones where the fill's two
    tenant rules show: without reading entries only up to what a tenant may still add (192,
    225) or without passing over for the rest of the fill a piece whose tenant reached its
    part (1243), the planner takes other rounds than the scan there."""
    w = serve_against_the_oracle(*random_case(seed, tenants=True))
    assert w.rounds > 0


def test_the_random_tenant_workloads_share_rounds() -> None:
    """The several-tenant cases above are not one tenant at a time: across the 40 seeds, many
    rounds hold pieces of two or more tenants (the parts and the short round at work)."""
    shared = sum(
        serve_against_the_oracle(*random_case(seed, tenants=True)).shared_rounds
        for seed in range(0, 40, 4)
    )
    assert shared >= 20
