"""assembly/pace.py on its own: a burst of members goes through the loop in slices of
`per_tick` per iteration, first come first served, and the loop reads its sockets (runs other
callbacks) between slices; a cancelled waiter gives its turn to the next. And where a member
takes its turns (round.py's docstring says why two): at its transport's admission (here gRPC's
servicer: the HTTP edge's is the edge's tests' business) and before its answer in its round,
none in the assembler between them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from reweighter.api.grpc.servicer import ReweighterServicer
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
