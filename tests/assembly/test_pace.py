"""assembly/pace.py on its own: a burst of members goes through the loop in slices of
`per_tick` per iteration, first come first served, and the loop reads its sockets (runs other
callbacks) between slices; a cancelled waiter gives its turn to the next."""

from __future__ import annotations

import asyncio

from reweighter.assembly.pace import Pace


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
