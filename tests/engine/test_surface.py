"""One engine surface: `EngineSurface` is what ReweightEngine offers, and the drain the service
puts in front of it guards every coroutine of the engine by construction (a coroutine added to
the engine is drained with no edit to shutdown.py)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from reweighter.engine import ReweightEngine
from reweighter.engine.surface import EngineSurface
from reweighter.errors import NotReady
from reweighter.shutdown import draining


def _members(cls: type) -> dict[str, bool]:
    """Public members declared on `cls` -> whether each is a coroutine function."""
    names = [n for n in cls.__dict__ if not n.startswith("_")]
    names += [n for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")]
    return {n: inspect.iscoroutinefunction(getattr(cls, n, None)) for n in names}


def test_the_engine_offers_the_whole_surface_as_declared() -> None:
    engine = ReweightEngine.__dict__
    for name, is_coroutine in _members(EngineSurface).items():
        if name in ("settings", "board"):  # attributes, set in __init__
            assert f"self.{name} =" in inspect.getsource(ReweightEngine.__init__)
            continue
        assert name in engine, name
        assert inspect.iscoroutinefunction(engine[name]) == is_coroutine, name


class Toy:
    """An engine with a coroutine the surface has never heard of."""

    ready = True

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def areweight(self, request: object) -> str:
        return "reweighted"

    async def score_novelty(self, texts: list[str]) -> int:  # new: nobody listed it anywhere
        self.started.set()
        await asyncio.sleep(30)
        return len(texts)

    def info(self) -> dict:
        return {"version": "toy"}


async def test_every_coroutine_is_drained_a_new_one_too() -> None:
    toy = Toy()
    engine, drain = draining(toy)
    assert engine.ready and engine.info() == {"version": "toy"}  # the rest is the engine's
    assert await engine.areweight(None) == "reweighted"
    running = asyncio.create_task(engine.score_novelty(["a", "b"]))
    await toy.started.wait()
    drain.expire()
    with pytest.raises(NotReady, match="shutting down"):
        await running  # cancelled and answered NotReady, not left to the server's cut
    for call in (engine.areweight(None), engine.score_novelty([])):
        with pytest.raises(NotReady):
            await call  # after expiry, every call at once


def test_every_coroutine_of_the_real_engine_is_wrapped() -> None:
    engine, _ = draining(ReweightEngine.__new__(ReweightEngine))
    coroutines = [n for n, c in _members(ReweightEngine).items() if c]
    assert {"areweight", "aembed", "aclose"} <= set(coroutines)
    for name in coroutines:
        wrapped = getattr(engine, name)
        assert inspect.iscoroutinefunction(wrapped) and wrapped.__wrapped__ is not None, name
