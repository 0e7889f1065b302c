"""Dynamic batching: merged rounds, fair slices, per-request results and errors, 429, shutdown.

The real model computes every vector.

A gate (a threading.Event the wrapped encoder waits on) holds the worker busy so that rounds
are formed deterministically, without sleeps or timing assumptions.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from reweighter.embedding import CachingEmbedder
from reweighter.embedding.base import Encoder, Piece
from reweighter.embedding.batcher import SplitLanes
from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder
from reweighter.errors import NotReady, Overloaded

from .support import CountingEncoder, bundled_encoder, fresh_view


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
        await wait_for(lambda: emb.batcher.pending == 16 and emb.batcher.preparing == 0)
        gate.set()  # the 15 that queued meanwhile form one round
        results = await asyncio.gather(*tasks)
    finally:
        await emb.aclose()
    assert len(counting.calls) == 2 and len(counting.calls[0]) == 3
    # The shared text is in flight with request 0: computed once for all 16 requests.
    assert len(counting.calls[1]) == 15 * 2
    assert "the shared final answer" not in counting.calls[1]
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
        await wait_for(lambda: emb.batcher.pending == 4 and emb.batcher.preparing == 0)
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


class SliceRecorder(Encoder):
    """The real encoder's sliced path, recording which text owns each piece of every model call.

    Not a mock: split, embed_pieces and pool are the real encoder's; the first call may be held
    at a gate so that the test decides what is queued behind it.
    """

    def __init__(self, inner: SentenceTransformerEncoder, gate: threading.Event) -> None:
        self.inner, self.gate = inner, gate
        self.model_id, self.dim, self.device = inner.model_id, inner.dim, inner.device
        self.owner: dict[int, str] = {}
        self.calls: list[list[str]] = []
        self.entered = threading.Event()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode(texts)

    def split(self, texts: Sequence[str]) -> list[Piece]:
        pieces = self.inner.split(texts)
        for p in pieces:
            self.owner[id(p)] = texts[p.text]
        return pieces

    def embed_pieces(self, pieces: Sequence[Piece]) -> np.ndarray:
        self.calls.append([self.owner[id(p)] for p in pieces])
        self.entered.set()
        assert self.gate.wait(30), "test gate never opened"
        return self.inner.embed_pieces(pieces)

    def pool(self, pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray:
        return self.inner.pool(pieces, vecs)


async def queued_behind_a_held_request(
    emb: CachingEmbedder, rec: SliceRecorder, reqs: list[list[str]]
) -> list[np.ndarray]:
    """Queue `reqs` while a first request holds the worker at the gate, then let all run: the
    rounds form from everything queued at once, deterministically."""
    try:
        first = asyncio.create_task(emb.aencode(["held at the gate"]))
        await wait_for(rec.entered.is_set)
        tasks = [asyncio.create_task(emb.aencode(texts)) for texts in reqs]
        queued = len(reqs) + 1
        await wait_for(lambda: emb.batcher.pending == queued and emb.batcher.preparing == 0)
        rec.gate.set()
        got = await asyncio.gather(*tasks)
        await first
    finally:
        rec.gate.set()
        await emb.aclose()
    return list(got)


def huge_text(windows: int) -> str:
    words = " ".join(f"step {i}: {i} + {i} = {2 * i}." for i in range(windows * 40))
    return words


@pytest.mark.slow
async def test_a_small_request_overtakes_a_huge_one() -> None:
    """Issue 11.1: the windows of one huge text are sliced; a small request that arrives while
    it encodes runs in the next round, not after the huge text's remaining windows."""
    view = fresh_view()
    big = huge_text(8)
    n_windows = len(view.split([big]))
    assert n_windows >= 6
    gate = threading.Event()
    rec = SliceRecorder(view, gate)
    emb = CachingEmbedder(rec, cache=None, slice_tokens=2 * view.window)  # two windows a slice
    emb.batcher.round_tokens = 2 * view.window  # the huge text does not fit in one round
    small = ["a short answer: 4", "another short answer: 5"]
    done: list[str] = []

    async def call(name: str, texts: list[str]) -> np.ndarray:
        out = await emb.aencode(texts)
        done.append(name)
        return out

    try:
        big_task = asyncio.create_task(call("big", [big]))
        await wait_for(rec.entered.is_set)  # the first slice of the huge text is at the gate
        small_task = asyncio.create_task(call("small", small))
        await wait_for(lambda: emb.batcher.pending == 2 and emb.batcher.preparing == 0)
        gate.set()
        got_big, got_small = await asyncio.gather(big_task, small_task)
    finally:
        gate.set()
        await emb.aclose()
    assert rec.calls[0] == [big, big]  # one slice: two windows, not the whole text
    assert set(small) <= set(rec.calls[1])  # the small request runs in the very next round
    # ... alone: a round is one padded batch, and two windows of the huge text would pad the
    # short answers to a full window (3 rows x 256 > the round's 512 padded tokens).
    assert rec.calls[1].count(big) == 0
    assert all(set(c) == {big} for c in rec.calls[2:])  # the rest of the huge text follows
    assert sum(c.count(big) for c in rec.calls) == n_windows
    assert done == ["small", "big"]
    # Slicing changes the order of work, never the numbers.
    ref = bundled_encoder()
    np.testing.assert_allclose(got_big, ref.encode([big]), atol=1e-5)
    np.testing.assert_allclose(got_small, ref.encode(small), atol=1e-5)


async def test_rounds_serve_the_least_recently_served_request_first() -> None:
    """With room for one slice per round, two long requests alternate and a newcomer goes
    before both: round-robin, so no request waits for another's whole length."""
    view = fresh_view()
    gate = threading.Event()
    rec = SliceRecorder(view, gate)
    emb = CachingEmbedder(rec, cache=None, slice_tokens=view.window)
    emb.batcher.round_tokens = 1  # every round is full after its first slice (one window)
    a, b, c = huge_text(3), huge_text(3) + " (b)", "a newcomer"
    try:
        first = asyncio.create_task(emb.aencode([a]))
        await wait_for(rec.entered.is_set)
        second = asyncio.create_task(emb.aencode([b]))
        await wait_for(lambda: emb.batcher.pending == 2 and emb.batcher.preparing == 0)
        third = asyncio.create_task(emb.aencode([c]))
        await wait_for(lambda: emb.batcher.pending == 3 and emb.batcher.preparing == 0)
        gate.set()
        await asyncio.gather(first, second, third)
    finally:
        gate.set()
        await emb.aclose()
    owners = [call[0] for call in rec.calls]
    assert all(len(call) == 1 for call in rec.calls)
    assert owners[:6] == [a, b, c, a, b, a]
    assert owners.count(a) == owners.count(b) == len(view.split([a]))


async def test_a_text_shared_by_requests_in_flight_is_computed_once() -> None:
    view = fresh_view()
    gate = threading.Event()
    rec = SliceRecorder(view, gate)
    emb = CachingEmbedder(rec, cache=None)
    shared = huge_text(2)
    try:
        first = asyncio.create_task(emb.aencode([shared, "one"]))
        await wait_for(rec.entered.is_set)
        second = asyncio.create_task(emb.aencode(["two", shared]))
        await wait_for(lambda: emb.batcher.pending == 2 and emb.batcher.preparing == 0)
        gate.set()
        x, y = await asyncio.gather(first, second)
    finally:
        gate.set()
        await emb.aclose()
    assert sum(call.count(shared) for call in rec.calls) == len(view.split([shared]))
    np.testing.assert_allclose(x[0], y[1])


@pytest.mark.slow
async def test_a_round_is_one_padded_batch_of_alike_lengths() -> None:
    """Concurrent requests of mixed lengths: each round stays within the padded budget (rows x
    longest piece; an overflow used to become a tiny second batch) and every request hands
    over its longest texts first, so a round pads little."""
    view = fresh_view()
    gate = threading.Event()
    rec = SliceRecorder(view, gate)
    emb = CachingEmbedder(rec, cache=None, slice_tokens=120)
    emb.batcher.round_tokens = 480
    sizes = [3, 40, 12, 25, 6, 33]  # text order is not length order
    reqs = [[" ".join(f"r{r} w{i}" for i in range(n)) for n in sizes] for r in range(4)]
    tokens = {t: c for texts in reqs for t, c in zip(texts, view.count_tokens(texts), strict=True)}
    got = await queued_behind_a_held_request(emb, rec, reqs)
    rounds = rec.calls[1:]
    assert sum(len(c) for c in rounds) == sum(len(r) for r in reqs)  # every text once
    for call in rounds:
        lengths = [tokens[t] for t in call]
        # (the last round may take a left-over tail of up to a quarter more: see below)
        assert len(call) == 1 or len(call) * max(lengths) <= 480 * 5 // 4, lengths
    for texts in reqs:  # each request's texts reach the model longest first
        order = [t for call in rounds for t in call if t in texts]
        assert [tokens[t] for t in order] == sorted((tokens[t] for t in texts), reverse=True)
    ref = bundled_encoder()
    for texts, vecs in zip(reqs, got, strict=True):  # reordering never changes the numbers
        np.testing.assert_allclose(vecs, ref.encode(texts), atol=1e-5)


def _mixed_texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        f"text {seed}.{i}: "
        + " ".join(f"step {k}: {k} + {i} = {k + i}." for k in range(int(rng.integers(4, 18))))
        for i in range(n)
    ]


def _padded(view: SentenceTransformerEncoder, calls: list[list[str]]) -> tuple[int, int]:
    """(real, padded) tokens of the recorded model calls (each call is one padded batch)."""
    real = padded = 0
    for call in calls:
        lengths = view.count_tokens(call)
        real += sum(lengths)
        padded += len(lengths) * max(lengths)
    return real, padded


@pytest.mark.slow
async def test_a_request_alone_runs_in_full_passes() -> None:
    """One request larger than a round used to get one slice per round (a quarter of a pass:
    128 texts took 57 passes where one sorted encode takes 13). Alone, it now runs in exactly
    the passes the encoder's own global sort forms."""
    view = fresh_view()
    view.max_batch_tokens = 600
    rec = SliceRecorder(view, threading.Event())
    rec.gate.set()
    emb = CachingEmbedder(rec, cache=None, slice_tokens=150)  # a round: 4 x 150 = 600 tokens
    texts = _mixed_texts(40, seed=1)
    try:
        got = await emb.aencode(texts)
    finally:
        await emb.aclose()
    pieces = view.split(texts)
    assert sum(p.tokens for p in pieces) > 3 * emb.batcher.round_tokens  # several rounds
    assert len(rec.calls) <= len(view.budget.batches(pieces))  # (a small tail joins the last pass)
    np.testing.assert_allclose(got, bundled_encoder().encode(texts), atol=1e-5)


@pytest.mark.slow
async def test_concurrent_requests_pad_nearly_as_little_as_one_global_sort() -> None:
    """Eight requests of mixed lengths queued together: every round takes the pieces that pad
    least against the anchor's, so the padded work stays within 5 % of one global sort's
    (a slice from every request in turn padded every round to a mixed set's longest)."""
    view = fresh_view()
    view.max_batch_tokens = 600
    gate = threading.Event()
    rec = SliceRecorder(view, gate)
    emb = CachingEmbedder(rec, cache=None, slice_tokens=150)
    reqs = [_mixed_texts(12, seed=10 + r) for r in range(8)]
    got = await queued_behind_a_held_request(emb, rec, reqs)
    rounds = rec.calls[1:]
    everything = [t for texts in reqs for t in texts]
    assert sorted(t for call in rounds for t in call) == sorted(everything)  # each text once
    pieces = view.split(everything)
    batches = view.budget.batches(pieces)
    sorted_padded = sum(len(b) * max(pieces[i].tokens for i in b) for b in batches)
    real, padded = _padded(view, rounds)
    assert padded <= 1.05 * sorted_padded, (real / padded, real / sorted_padded)
    assert len(rounds) <= len(batches) + 1
    for call in rounds:  # still one padded batch a round (the last: up to a quarter more)
        lengths = view.count_tokens(call)
        assert len(call) * max(lengths) <= emb.batcher.round_tokens * 5 // 4
    for texts, vecs in zip(reqs, got, strict=True):
        np.testing.assert_allclose(vecs, bundled_encoder().encode(texts), atol=1e-5)


async def test_a_newcomer_of_other_lengths_anchors_the_next_round() -> None:
    """Work-conserving rounds fill with what pads least, but never starve: a request of short
    texts that arrives behind long ones is served whole in the very next round."""
    view = fresh_view()
    view.max_batch_tokens = 600
    gate = threading.Event()
    rec = SliceRecorder(view, gate)
    emb = CachingEmbedder(rec, cache=None, slice_tokens=150)
    longs = [" ".join(f"long step {k} of {r}." for k in range(30)) for r in range(30)]
    shorts = ["4", "five"]
    try:
        first = asyncio.create_task(emb.aencode(longs))
        await wait_for(rec.entered.is_set)
        second = asyncio.create_task(emb.aencode(shorts))
        await wait_for(lambda: emb.batcher.pending == 2 and emb.batcher.preparing == 0)
        gate.set()
        await asyncio.gather(first, second)
    finally:
        gate.set()
        await emb.aclose()
    assert set(shorts) <= set(rec.calls[1])


async def test_a_small_tail_joins_the_last_round_instead_of_a_pass_of_its_own() -> None:
    """Work that overflows a round by at most a quarter runs as one pass: a pass of a few
    left-over pieces costs about a third of a full one."""
    view = fresh_view()
    view.max_batch_tokens = 10_000
    rec = SliceRecorder(view, threading.Event())
    rec.gate.set()
    emb = CachingEmbedder(rec, cache=None, slice_tokens=150)  # a round: 600 padded tokens
    texts = [f"answer {i}: " + "the sum is four " * 12 for i in range(12)]
    lengths = view.count_tokens(texts)
    assert len(set(lengths)) == 1
    assert 600 < 12 * lengths[0] <= 750
    try:
        got = await emb.aencode(texts)
        assert len(rec.calls) == 1
        more = [f"other {i}: " + "the sum is five " * 12 for i in range(16)]
        assert 16 * max(view.count_tokens(more)) > 750
        await emb.aencode(more)
        assert len(rec.calls) == 3  # beyond a quarter: a round and a second pass
    finally:
        await emb.aclose()
    np.testing.assert_allclose(got, bundled_encoder().encode(texts), atol=1e-5)



class HeldSplit(Encoder):
    """The real encoder, whose tokenising of texts longer than `long` waits at a gate, recording
    the thread each split ran in (not a mock: every piece and vector is the real encoder's)."""

    def __init__(self, inner: SentenceTransformerEncoder, gate: threading.Event, long: int):
        self.inner, self.gate, self.long = inner, gate, long
        self.model_id, self.dim, self.device = inner.model_id, inner.dim, inner.device
        self.held = threading.Event()
        self.threads: dict[str, str] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode(texts)

    def split(self, texts: Sequence[str]) -> list[Piece]:
        for t in texts:
            self.threads[t] = threading.current_thread().name
        if any(len(t) > self.long for t in texts):
            self.held.set()
            assert self.gate.wait(30), "test gate never opened"
        return self.inner.split(texts)

    def embed_pieces(self, pieces: Sequence[Piece]) -> np.ndarray:
        return self.inner.embed_pieces(pieces)

    def pool(self, pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray:
        return self.inner.pool(pieces, vecs)


async def test_a_large_requests_tokenising_never_holds_up_small_ones() -> None:
    """Tokenising runs in lanes of the batcher's own threads (SplitLanes): a request over the
    lanes' `large_chars` in one, the others in the other. With one thread a lane and a large
    request's tokenising held, a small request is still tokenised, computed and answered."""
    view = fresh_view()
    gate = threading.Event()
    big = huge_text(2)
    enc = HeldSplit(view, gate, long=len(big) - 1)
    emb = CachingEmbedder(enc, cache=None)
    # one thread a lane (the count is the machine's otherwise): the lanes keep them apart
    emb.batcher._lanes = SplitLanes("test", threads=1, large_chars=len(big) - 1)
    small = ["a short answer: 4", "another short answer: 5"]
    try:
        big_task = asyncio.create_task(emb.aencode([big]))
        await wait_for(enc.held.is_set)  # the large request's tokenising is held in its lane
        got_small = await asyncio.wait_for(emb.aencode(small), 30)
        assert not big_task.done()
        gate.set()
        got_big = await big_task
    finally:
        gate.set()
        await emb.aclose()
    assert enc.threads[big].startswith("test-split-large")
    assert {enc.threads[t] for t in small} == {"test-split_0"}
    ref = bundled_encoder()
    np.testing.assert_allclose(got_small, ref.encode(small), atol=1e-5)
    np.testing.assert_allclose(got_big, ref.encode([big]), atol=1e-5)


def test_split_lanes_stop_and_then_refuse() -> None:
    lanes = SplitLanes("test", threads=1)
    assert lanes.submit(lambda jobs: None, []).result(10) is None
    lanes.shutdown()
    with pytest.raises(RuntimeError):
        lanes.submit(lambda jobs: None, [])


async def test_the_worker_keeps_each_requests_length_index_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The policy reads each request's LengthIndex (plan/index.py); the worker keeps it as texts are
    split and rounds take them. At every plan, each request's index is exactly a fresh one:
    texts shared between requests, texts of several windows, small rounds."""
    import reweighter.embedding.batcher as batcher_module
    from reweighter.embedding.plan import LengthIndex

    real_plan = batcher_module.plan
    checked: list[int] = []

    def checking_plan(pending, budget, *shares):  # noqa: ANN001, ANN202 - plan's signature
        for req in pending:
            assert req.length_index.entries == LengthIndex(req.jobs).entries
        checked.append(len(pending))
        return real_plan(pending, budget, *shares)

    monkeypatch.setattr(batcher_module, "plan", checking_plan)
    view = fresh_view()
    gate = threading.Event()
    rec = SliceRecorder(view, gate)
    emb = CachingEmbedder(rec, cache=None, slice_tokens=view.window)
    emb.batcher.round_tokens = 2 * view.window  # many small rounds
    reqs = [[huge_text(3), f"request {i}: the answer is {i}", "the shared final answer",
             *(f"request {i}, step {k}: {k} + {k} = {2 * k}" for k in range(i))]
            for i in range(6)]  # fmt: skip
    got = await queued_behind_a_held_request(emb, rec, reqs)
    assert len(checked) >= 6 and max(checked) >= 6
    ref = bundled_encoder()
    for texts, vecs in zip(reqs, got, strict=True):
        np.testing.assert_allclose(vecs, ref.encode(texts), atol=1e-5)
