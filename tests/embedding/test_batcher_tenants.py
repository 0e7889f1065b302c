"""The worker applies plan.round_budget: one-slice rounds while a second tenant is around, full
rounds again once it has gone for LINGER_ROUNDS rounds, and full rounds for one tenant.

A plain encoder with exact token counts (40 characters = 10 tokens: `Encoder.count_tokens`) and
a gate that holds the first round, so the rounds form deterministically (no clock, no model).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np

from reweighter.embedding.base import Encoder, Piece
from reweighter.embedding.batcher import DynamicBatcher
from reweighter.embedding.plan import LINGER_ROUNDS


class Gated(Encoder):
    """Records each round's texts; holds the first round until `gate` opens."""

    model_id, dim, device = "gated-test-encoder", 4, "cpu"

    def __init__(self) -> None:
        self.gate, self.entered = threading.Event(), threading.Event()
        self.rounds: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 0] = 1.0
        return out

    def embed_pieces(self, pieces: Sequence[Piece]) -> np.ndarray:
        self.rounds.append([p.data for p in pieces])
        self.entered.set()
        assert self.gate.wait(30), "test gate never opened"
        return self.encode([p.data for p in pieces])


def texts(tag: str, n: int) -> list[str]:
    return [f"{tag} {i:03d}".ljust(40, ".") for i in range(n)]  # 10 tokens each


async def wait_for(cond, timeout: float = 30.0) -> None:  # noqa: ANN001 - a predicate
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition never became true"
        await asyncio.sleep(0.005)


async def rounds_with(light_tenant: str, n_flood: int = 40) -> list[list[str]]:
    """A flood of 40 texts (tenant flood) is held in its first round; a light request of 2
    texts (of `light_tenant`) queues meanwhile; then everything runs. Round: 80 tokens (8
    rows), slice 20."""
    enc = Gated()
    b = DynamicBatcher(enc, slice_tokens=20, round_tokens=80)
    try:
        flood = asyncio.create_task(b.submit(texts("flood", n_flood), tenant="flood"))
        await wait_for(enc.entered.is_set)
        light = asyncio.create_task(b.submit(texts("light", 2), tenant=light_tenant))
        await wait_for(lambda: b.pending == 2 and b.preparing == 0)
        enc.gate.set()
        await asyncio.gather(flood, light)
    finally:
        enc.gate.set()
        await b.aclose()
    return enc.rounds


def count(rounds: list[list[str]], tag: str) -> list[int]:
    return [sum(t.startswith(tag) for t in r) for r in rounds]


async def test_rounds_are_one_slice_while_another_tenant_is_around() -> None:
    """Round 1 (held): 8 flood texts, the flood alone. Round 2: the light request anchors a
    one-slice round (20 tokens) and fills it: 2 light texts. Rounds 3 to 2 + LINGER_ROUNDS: the
    light request is answered but its tenant is still around: one slice, 2 flood texts each.
    Then full rounds of 8 again; the last 4 alone (12 x 10 > the tail's 100)."""
    n = 8 + 2 * LINGER_ROUNDS + 12
    rounds = await rounds_with("light", n)
    assert count(rounds, "light") == [0, 2] + [0] * (LINGER_ROUNDS + 2)
    assert count(rounds, "flood") == [8, 0] + [2] * LINGER_ROUNDS + [8, 4]


async def test_one_tenant_keeps_full_rounds() -> None:
    """The same requests from one tenant: the single-tenant rule, full rounds throughout (the
    small request anchors round 2 whole and the fill tops it up to 8; the last 10 are one
    round: 10 x 10 tokens is within the tail's 80 + 20)."""
    rounds = await rounds_with("flood")
    assert count(rounds, "light") == [0, 2, 0, 0, 0]
    assert [len(r) for r in rounds] == [8, 8, 8, 8, 10]


async def test_a_requests_texts_reach_the_worker_in_one_hand_over() -> None:
    """The worker must never plan a round on part of a request: it would take that part as all
    there is (the tail rule included) and the rest a round later, so rounds would depend on
    when it woke (seen: [10, 8, 8, 8, 8] instead of [8, 8, 8, 8, 10], once under load). Every
    wake-up the tokenising thread gives the worker sees none or all of the request's texts."""
    enc = Gated()
    b = DynamicBatcher(enc, slice_tokens=20, round_tokens=80)
    seen: list[int] = []
    cond = b._cond

    class Watching(type(cond)):  # type: ignore[misc]
        def notify_all(self) -> None:
            seen.append(sum(1 for m in b._inbox if type(m).__name__ == "Split"))
            super().notify_all()

    b._cond = Watching(cond._lock)  # type: ignore[attr-defined]
    try:
        first = asyncio.create_task(b.submit(texts("first", 1)))
        await wait_for(enc.entered.is_set)  # the worker holds round 1: the inbox fills
        seen.clear()
        second = asyncio.create_task(b.submit(texts("second", 12)))
        await wait_for(lambda: b.pending == 2 and b.preparing == 0)
        assert 12 in seen and not any(0 < n < 12 for n in seen), seen
        enc.gate.set()
        await asyncio.gather(first, second)
    finally:
        enc.gate.set()
        await b.aclose()
    assert [len(r) for r in enc.rounds] == [1, 8, 4]
