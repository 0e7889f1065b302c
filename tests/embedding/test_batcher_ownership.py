"""The batcher's worker owns its queue: the event loop never waits while the worker plans.

Before the policy was a pure function, the worker planned a round (up to 4,096 candidates)
holding the lock `submit` takes, so every arriving request blocked the event loop for the
length of a plan. Here the worker is held inside `plan` (a threading.Event, no timing
assumption) while the loop registers another request; the real model computes every vector.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import numpy as np
import pytest

import reweighter.embedding.batcher as batcher_module
from reweighter.embedding import CachingEmbedder
from reweighter.embedding.batcher import SplitLanes

from .support import bundled_encoder, fresh_view


async def test_submit_registers_while_the_worker_is_planning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planning, release = threading.Event(), threading.Event()
    stuck: list[bool] = []
    real_plan = batcher_module.plan

    def held_plan(pending, budget):  # noqa: ANN001, ANN202 - plan's own signature
        if pending and not release.is_set():
            planning.set()
            stuck.append(not release.wait(20))  # a safety net: never hang the suite
        return real_plan(pending, budget)

    monkeypatch.setattr(batcher_module, "plan", held_plan)
    emb = CachingEmbedder(fresh_view(), cache=None)
    try:
        first = asyncio.create_task(emb.aencode(["the first request"]))
        while not planning.is_set():
            await asyncio.sleep(0.005)
        second = asyncio.create_task(emb.aencode(["the second request"]))
        while emb.batcher.pending < 2:  # registered by the loop, the worker still in plan
            await asyncio.sleep(0.005)
        assert not release.is_set() and not stuck
        release.set()
        got = await asyncio.gather(first, second)
    finally:
        release.set()
        await emb.aclose()
    assert stuck == [False]
    ref = bundled_encoder()
    np.testing.assert_allclose(got[0], ref.encode(["the first request"]), atol=1e-5)
    np.testing.assert_allclose(got[1], ref.encode(["the second request"]), atol=1e-5)


async def test_a_caller_cancelled_before_its_texts_are_split_strands_nobody() -> None:
    """Texts in flight are shared: a second request for the same text waits on the first
    request's tokenising. If the first caller goes away while its tokenising still waits for a
    free lane thread, the tokenising must run anyway, or the second request would wait for
    pieces that never come (until its own timeout). One lane thread, held by an Event, so the
    order is forced without timing assumptions; the real model computes the vector."""
    emb = CachingEmbedder(fresh_view(), cache=None)
    emb.batcher._lanes = SplitLanes("test", threads=1)  # one thread, so the blocker holds it
    busy, release = threading.Event(), threading.Event()
    blocker = emb.batcher._lanes.submit(lambda jobs: (busy.set(), release.wait(20)), [])
    text = "one text, asked for twice"

    async def until(cond) -> None:  # noqa: ANN001 - a safety net: never hang the suite
        for _ in range(4000):
            if cond():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("condition never became true")

    try:
        await until(busy.is_set)
        first = asyncio.create_task(emb.aencode([text]))
        await until(lambda: emb.batcher.preparing >= 1)  # its split queued behind the blocker
        second = asyncio.create_task(emb.aencode([text]))  # shares the text in flight
        await until(lambda: emb.batcher.pending >= 2)
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        release.set()
        blocker.result(20)
        got = await asyncio.wait_for(second, 8)
    finally:
        release.set()
        await emb.aclose()
    np.testing.assert_allclose(got, bundled_encoder().encode([text]), atol=1e-5)


async def test_a_planning_failure_answers_the_waiting_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the policy must not kill the worker and leave every caller waiting: the
    requests then queued get the error, and the next request is served as usual."""
    real_plan = batcher_module.plan
    failures = [RuntimeError("a planning bug")]

    def failing_once(pending, budget, *shares):  # noqa: ANN001, ANN202 - plan's signature
        if failures and pending:
            raise failures.pop()
        return real_plan(pending, budget, *shares)

    monkeypatch.setattr(batcher_module, "plan", failing_once)
    emb = CachingEmbedder(fresh_view(), cache=None)
    try:
        with pytest.raises(RuntimeError, match="a planning bug"):
            await asyncio.wait_for(emb.aencode(["the first request"]), 30)
        got = await asyncio.wait_for(emb.aencode(["the next request"]), 30)
    finally:
        await emb.aclose()
    np.testing.assert_allclose(got, bundled_encoder().encode(["the next request"]), atol=1e-5)
