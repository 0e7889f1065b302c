"""The batcher's policy, `plan(pending, budget)`, without threads, models or clocks.

Every expected round is computed by hand from the rule in reweighter/embedding/plan.py
(anchor, fill, tail) and written out piece by piece; the pieces are plain token counts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from reweighter.embedding.base import Budget, Piece
from reweighter.embedding.plan import Range, RoundBudget, Slice, plan


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
    return [
        (s.request.seq, [(r.job.tokens[0], r.start, r.end) for r in s.ranges]) for s in round_
    ]


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
