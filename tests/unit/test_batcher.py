"""Dynamic batching: merged rounds, per-request results and errors, 429, shutdown (real model).

A gate (a threading.Event the wrapped encoder waits on) holds the worker busy so that rounds
are formed deterministically, without sleeps or timing assumptions.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from test_embedding_support import CountingEncoder, bundled_encoder, fresh_view

from reweighter.embedding import CachingEmbedder
from reweighter.errors import NotReady, Overloaded


async def wait_for(cond, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition never became true"
        await asyncio.sleep(0.005)


def request(i: int) -> list[str]:
    # Overlapping requests: each has a private text, a text shared by all, and a repeat.
    return [f"request {i}: 2 + {i} = {2 + i}", "the shared final answer", f"request {i} done"]


async def test_concurrent_requests_get_their_own_vectors() -> None:
    gate = threading.Event()
    counting = CountingEncoder(fresh_view(), gate=gate)
    emb = CachingEmbedder(counting, cache=None)
    try:
        tasks = [asyncio.create_task(emb.aencode(request(0)))]
        await wait_for(counting.entered.is_set)  # the worker holds request 0 at the gate
        tasks += [asyncio.create_task(emb.aencode(request(i))) for i in range(1, 16)]
        await wait_for(lambda: emb.batcher.pending == 16)
        gate.set()  # the 15 that queued meanwhile form one round
        results = await asyncio.gather(*tasks)
    finally:
        await emb.aclose()
    assert len(counting.calls) == 2 and len(counting.calls[0]) == 3
    assert len(counting.calls[1]) == 15 * 2 + 1  # the shared text computed once for 15 requests
    ref = bundled_encoder()
    for i, got in enumerate(results):
        np.testing.assert_allclose(got, ref.encode(request(i)), atol=1e-5)


async def test_event_loop_stays_free_while_the_model_runs() -> None:
    gate = threading.Event()
    emb = CachingEmbedder(CountingEncoder(fresh_view(), gate=gate), cache=None)
    try:
        task = asyncio.create_task(emb.aencode(["a slow batch"]))
        ticks = 0
        for _ in range(5):  # the loop keeps serving other coroutines meanwhile
            await asyncio.sleep(0.001)
            ticks += 1
        assert ticks == 5 and not task.done()
        gate.set()
        assert (await task).shape == (1, 384)
    finally:
        gate.set()
        await emb.aclose()


async def test_full_queue_raises_overloaded_at_once() -> None:
    gate = threading.Event()
    emb = CachingEmbedder(CountingEncoder(fresh_view(), gate=gate), cache=None, max_queue=2)
    try:
        first = asyncio.create_task(emb.aencode(["first"]))
        second = asyncio.create_task(emb.aencode(["second"]))
        await wait_for(lambda: emb.batcher.pending == 2)
        with pytest.raises(Overloaded) as e:
            await emb.aencode(["third"])
        assert e.value.http_status == 429
        gate.set()
        a, b = await asyncio.gather(first, second)
        ref = bundled_encoder().encode(["first", "second"])
        np.testing.assert_allclose(np.vstack([a, b]), ref, atol=1e-5)
        assert emb.batcher.pending == 0
        assert (await emb.aencode(["third"])).shape == (1, 384)  # room again
    finally:
        gate.set()
        await emb.aclose()


async def test_an_encoder_error_reaches_only_its_callers() -> None:
    gate = threading.Event()
    counting = CountingEncoder(fresh_view(), gate=gate, fail_on="BOOM")
    emb = CachingEmbedder(counting, cache=None)
    texts = [["ok zero"], ["ok one"], ["BOOM here", "with a good one"], ["ok three"]]
    try:
        tasks = [asyncio.create_task(emb.aencode(texts[0]))]
        await wait_for(counting.entered.is_set)
        tasks += [asyncio.create_task(emb.aencode(t)) for t in texts[1:]]
        await wait_for(lambda: emb.batcher.pending == 4)
        gate.set()  # round 2 merges three requests, one of which fails
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await emb.aclose()
    assert isinstance(results[2], ValueError) and "BOOM" in str(results[2])
    # request 0 alone, then the merged round of 1-3 fails and is retried request by request
    assert [len(c) for c in counting.calls] == [1, 4, 1, 2, 1]
    ref = bundled_encoder()
    for i in (0, 1, 3):
        np.testing.assert_allclose(results[i], ref.encode(texts[i]), atol=1e-5)


async def test_a_cancelled_caller_does_not_disturb_the_others() -> None:
    gate = threading.Event()
    counting = CountingEncoder(fresh_view(), gate=gate)
    emb = CachingEmbedder(counting, cache=None)
    try:
        keep = asyncio.create_task(emb.aencode(["kept"]))
        drop = asyncio.create_task(emb.aencode(["dropped"]))
        await wait_for(lambda: emb.batcher.pending == 2)
        drop.cancel()
        gate.set()
        assert (await keep).shape == (1, 384)
        with pytest.raises(asyncio.CancelledError):
            await drop
        await wait_for(lambda: emb.batcher.pending == 0)
    finally:
        gate.set()
        await emb.aclose()


async def test_aclose_finishes_in_flight_work_then_refuses() -> None:
    gate = threading.Event()
    emb = CachingEmbedder(CountingEncoder(fresh_view(), gate=gate), cache=None)
    tasks = [asyncio.create_task(emb.aencode([f"in flight {i}"])) for i in range(3)]
    await wait_for(lambda: emb.batcher.pending == 3)
    closing = asyncio.create_task(emb.aclose())
    await asyncio.sleep(0.01)
    assert not closing.done()  # waits for the queued work
    gate.set()
    results = await asyncio.gather(*tasks)
    await closing
    assert [r.shape for r in results] == [(1, 384)] * 3
    with pytest.raises(NotReady):
        await emb.aencode(["too late"])
