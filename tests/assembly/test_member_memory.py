"""What a waiting member costs, bounded (issue 51 item 4).

Why: under the open-group flood (bench/bench_health_flood.py: 20,000 one-member groups that
never complete) every waiting member opens a round of its own and every round that closes
short is kept `assembly_result_ttl_s` for retries, so a member's bytes are the server's RSS
growth. bench/bench_member_memory.py attributes them line by line (tracemalloc); this test
holds the totals, in process, on the in-process store, for the flood's member (a 2-d
embedding): a member waiting (its round, its wait, its records, its submit's task) and a
member answered (its round's result, kept). Measured here: 5.7 KB waiting and 1.8 KB kept;
with the commit before 2600351, 10.1 KB and 4.0 KB (each round its own GroupMeta, an
asyncio.Event per round, a shield per waiter, the parsed member held through the wait, a set
of given fields per record): this test failed there.
The bounds leave room for the interpreter, not for a second copy of a member.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

from reweighter.assembly import GroupAssembler, MemberSubmission, MemoryStore
from reweighter.engine import ReweightEngine
from reweighter.limits import AssemblyLimits

from .conftest import settings

N = 400
WAITING_BYTES = 7_500
"""Per waiting member of a one-member group (measured 5.7 KB; 10.1 KB before)."""
KEPT_BYTES = 2_500
"""Per member answered short, its round's result kept (measured 1.8 KB; 4.0 KB before)."""


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def test_a_waiting_member_and_its_kept_answer_stay_small(engine: ReweightEngine) -> None:
    s = settings()
    store = MemoryStore(AssemblyLimits.from_settings(s))
    asm = GroupAssembler(engine, store, s)
    await asm.start()

    def member(gid: str, timeout_s: float) -> MemberSubmission:
        return MemberSubmission(group_id=gid, member_id="0", group_size=8, reward=1.0,
                                embedding=[1.0, 0.5], timeout_s=timeout_s)  # fmt: skip

    # first use of every path (imports, the store's structures) outside the measurement
    await asyncio.gather(*(asm.submit(member(f"warm-{i}", 0.05)) for i in range(20)))
    # deadlines 2 ms apart: each member's answer takes its own loop turn (pace.py)
    subs = [member(f"flood-{i}", 1.5 + i / 500) for i in range(N)]
    tracemalloc.start(1)
    try:
        before = _traced()
        tasks = [asyncio.ensure_future(asm.submit(sub)) for sub in subs]
        while asm.waiting < N:
            await asyncio.sleep(0.01)
        waiting = (_traced() - before) / N
        # one meta for every round of equal settings, not one each
        first, last = await store.members("flood-0"), await store.members(f"flood-{N - 1}")
        assert first is not None and last is not None
        assert first.meta is last.meta
        answers = await asyncio.gather(*tasks)
        del tasks
        await asyncio.sleep(0.05)
        kept = (_traced() - before) / N
    finally:
        tracemalloc.stop()
    assert all(a.reason == "short" and a.members == 1 for a in answers)
    results = [await store.poll(f"flood-{i}", 0) for i in range(N)]
    assert all(r is not None for r, _ in results), "every short round's result is kept"
    assert waiting < WAITING_BYTES, f"{waiting:.0f} bytes per waiting member"
    assert kept < KEPT_BYTES, f"{kept:.0f} bytes per answered member (its kept result)"
    await asm.aclose()
