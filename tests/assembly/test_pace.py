"""assembly/pace.py on its own: a burst of members goes through the loop in slices of
`per_tick` per iteration, first come first served, and the loop reads its sockets (runs other
callbacks) between slices; a cancelled waiter gives its turn to the next. And where a member
takes its turns (round.py's docstring says why two): at its transport's admission (here gRPC's
servicer: the HTTP edge's is the edge's tests' business) and before its answer in its round,
none in the assembler between them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest

from reweighter.api.grpc.servicer import ReweighterServicer
from reweighter.api.http.app import create_app
from reweighter.api.metrics import Metrics
from reweighter.assembly import GroupAssembler, MemberSubmission, MemoryStore
from reweighter.assembly.pace import Pace
from reweighter.engine import ReweightEngine
from reweighter.limits import AssemblyLimits
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2 as pb
from reweighter.wire.grpc import to_proto

from .conftest import settings, waiting


class Iterations:
    """Counts loop iterations with a callback that re-arms itself (as I/O would run)."""

    def __init__(self) -> None:
        self.count = 0
        self.done = False
        self.loop = asyncio.get_running_loop()
        self.loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        if not self.done:
            self.loop.call_soon(self._tick)


def assembler(engine: ReweightEngine, per_tick: int) -> GroupAssembler:
    s = settings()
    asm = GroupAssembler(engine, MemoryStore(AssemblyLimits.from_settings(s)), s)
    asm.pace.per_tick = per_tick
    return asm


async def test_a_burst_passes_in_slices_with_the_loop_free_between() -> None:
    pace = Pace(per_tick=8)
    loop = asyncio.get_running_loop()
    tick = [0]  # loop iterations, counted by a callback that re-arms itself (as I/O would run)

    def count() -> None:
        tick[0] += 1
        if not done.is_set():
            loop.call_soon(count)

    done = asyncio.Event()
    passed: list[tuple[int, int]] = []  # (member, iteration it passed in)

    async def member(i: int) -> None:
        await pace.turn()
        passed.append((i, tick[0]))

    loop.call_soon(count)
    await asyncio.sleep(0)
    await asyncio.gather(*(member(i) for i in range(50)))
    done.set()
    assert [i for i, _ in passed] == list(range(50))  # first come, first served
    per_iteration: dict[int, int] = {}
    for _, t in passed:
        per_iteration[t] = per_iteration.get(t, 0) + 1
    assert max(per_iteration.values()) <= 8 and len(per_iteration) >= 50 // 8
    assert pace.waiting == 0


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    pace = Pace(per_tick=1)
    first = asyncio.ensure_future(pace.turn())
    second, third = asyncio.ensure_future(pace.turn()), asyncio.ensure_future(pace.turn())
    await asyncio.sleep(0)
    second.cancel()
    await asyncio.wait_for(asyncio.gather(first, third), 2)
    assert second.cancelled() and pace.waiting == 0


async def test_a_grpc_burst_of_members_is_admitted_in_slices(engine: ReweightEngine) -> None:
    """The servicer takes each member's turn before it converts and submits it (the assembler
    takes none): of 20 members sent at once, 8 reach their rounds in the first iteration, the
    rest in the next ones. Without the servicer's turn all 20 would in one."""
    asm = assembler(engine, per_tick=8)
    await asm.start()
    servicer = ReweighterServicer(engine, Metrics(engine), asm)
    context = SimpleNamespace()  # no deadline, and no error is expected here
    calls = [
        asyncio.ensure_future(servicer.SubmitMember(to_proto(
            MemberSubmission(f"g{i}", "a", 2, 1.0, embedding=[1.0, 0.0], timeout_s=30),
            pb.SubmitMemberRequest), context))
        for i in range(20)
    ]  # fmt: skip
    try:
        await asyncio.sleep(0)  # one iteration: every call has run up to its turn
        assert (asm.waiting, asm.pace.waiting) == (8, 12)
        await waiting(asm, 20)
        assert asm.pace.waiting == 0
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        await asm.aclose()


async def test_a_rounds_answers_go_out_in_slices(engine: ReweightEngine) -> None:
    """A whole round's result wakes its 40 waiters in one iteration; each takes its turn
    before its answer, so at most 8 are answered per iteration. No admission can slice this:
    they were admitted long before (here at once, as the assembler takes no turn)."""
    asm = assembler(engine, per_tick=8)
    n = 40
    subs = [
        MemberSubmission("whole", f"m{i:02d}", n, float(i % 2), embedding=[1.0, float(i)],
                         method="none")
        for i in range(n)
    ]  # fmt: skip
    iterations = Iterations()
    answered_in: list[int] = []

    async def member(sub: MemberSubmission) -> None:
        answer = await asm.submit(sub)
        assert answer.complete
        answered_in.append(iterations.count)

    try:
        await asyncio.gather(*(member(s) for s in subs))
    finally:
        iterations.done = True
        await asm.aclose()
    per_iteration: dict[int, int] = {}
    for it in answered_in:
        per_iteration[it] = per_iteration.get(it, 0) + 1
    assert len(answered_in) == n
    assert max(per_iteration.values()) <= 8 and len(per_iteration) >= n // 8


async def test_a_member_takes_two_turns_its_admission_and_its_answer(
    engine: ReweightEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On either transport and both HTTP member routes, a member takes one turn where its
    transport admits it and one before its answer: two in all, none in the assembler (over
    HTTP it took three while the assembler took one too; the OpenRLHF route's admission took
    none)."""
    asm = assembler(engine, per_tick=32)
    turns: list[str] = []
    original = asm.pace.turn

    async def counted() -> None:
        turns.append("turn")
        await original()

    monkeypatch.setattr(asm.pace, "turn", counted)
    app = create_app(engine, asm.settings, assembler=asm)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            member = {"member_id": "a", "group_size": 1, "reward": 1.0, "embedding": [1.0, 0.0]}
            r = await client.post("/v1/groups/g1/members", json=member)
            assert r.status_code == 200, r.text
            assert len(turns) == 2
            samples = [  # a group of two samples of one prompt (n=1 is answered unassembled)
                {"query": [f"2 + 2? {answer}"], "prompts": ["2 + 2?"], "labels": ["4"]}
                for answer in (4, 5)
            ]
            posts = [client.post("/v1/openrlhf/reward?n=2", json=s) for s in samples]
            for r in await asyncio.gather(*posts):
                assert r.status_code == 200, r.text
                assert r.json()["extra_logs"]["reweighted"] == [1.0]
            assert len(turns) == 6
        servicer = ReweighterServicer(engine, Metrics(engine), asm)
        sub = MemberSubmission("g2", "a", 1, 1.0, embedding=[1.0, 0.0])
        answer = await servicer.SubmitMember(to_proto(sub, pb.SubmitMemberRequest), object())
        assert answer.complete
        assert len(turns) == 8
    finally:
        await asm.aclose()
