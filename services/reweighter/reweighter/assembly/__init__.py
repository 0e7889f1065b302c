"""Group assembly: members of a group sent one at a time, reweighted once the group is whole.

See docs/integrations.md for the contract, rounds, failure modes and a sequence diagram.

The public API is small: `GroupAssembler(engine, store, settings)` with `await submit(member)
-> MemberResult`, `start()`, `aclose()`, its `stats`; `make_store(settings)`; the vocabulary
`MemberSubmission`, `MemberResult`, `MemberReason` (defined with every wire message in
reweighter.types, handed on here). The assembler and the stores are loaded on first use, so
importing the package imports no engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..types import MemberReason, MemberResult, MemberSubmission

if TYPE_CHECKING:
    from ..config import Settings
    from .assembler import AssemblyStats, GroupAssembler
    from .machine import AddOutcome
    from .store import AssemblyStore, MemoryStore

_WHERE = {
    "AssemblyStats": "assembler",
    "GroupAssembler": "assembler",
    "AddOutcome": "machine",
    "AssemblyStore": "store",
    "MemoryStore": "store",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_store(settings: Settings) -> AssemblyStore:
    """Redis when `redis_url` is set (replicas share groups), else this process's memory."""
    from ..limits import AssemblyLimits

    limits = AssemblyLimits.from_settings(settings)
    if settings.redis_url:
        from .redis_store import RedisStore

        return RedisStore(settings.redis_url, limits, settings.assembly_prefix)
    from .store import MemoryStore

    return MemoryStore(limits)


__all__ = [
    "AddOutcome",
    "AssemblyStats",
    "AssemblyStore",
    "GroupAssembler",
    "MemberReason",
    "MemberResult",
    "MemberSubmission",
    "MemoryStore",
    "make_store",
]
