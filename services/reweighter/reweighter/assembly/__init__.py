"""Group assembly: members of a group sent one at a time, reweighted once the group is whole.

See docs/integrations.md for the contract, rounds, failure modes and a sequence diagram.

The public API is small: `GroupAssembler(engine, store, settings)` with `await submit(member)
-> MemberResult`, `start()`, `aclose()`, its `stats`; `make_store(settings)`; the vocabulary
`MemberSubmission`, `MemberResult`, `MemberReason` (assembly/types.py). The names are loaded on
first use, so `reweighter.assembly.types` imports without the engine (the light client needs it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import Settings
    from .assembler import AssemblyStats, GroupAssembler
    from .store import AddOutcome, AssemblyStore, Limits, MemoryStore
    from .types import MemberReason, MemberResult, MemberSubmission

_WHERE = {
    "AssemblyStats": "assembler",
    "GroupAssembler": "assembler",
    "AddOutcome": "store",
    "AssemblyStore": "store",
    "Limits": "store",
    "MemoryStore": "store",
    "MemberReason": "types",
    "MemberResult": "types",
    "MemberSubmission": "types",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def limits_from(settings: Settings) -> Limits:
    from .store import Limits

    return Limits(
        max_open_groups=settings.assembly_max_open_groups,
        max_held_members=settings.assembly_max_held_members,
        result_ttl_s=settings.assembly_result_ttl_s,
    )


def make_store(settings: Settings) -> AssemblyStore:
    """Redis when `redis_url` is set (replicas share groups), else this process's memory."""
    if settings.redis_url:
        from .redis_store import RedisStore

        return RedisStore(settings.redis_url, limits_from(settings), settings.assembly_prefix)
    from .store import MemoryStore

    return MemoryStore(limits_from(settings))


__all__ = [
    "AddOutcome",
    "AssemblyStats",
    "AssemblyStore",
    "GroupAssembler",
    "Limits",
    "MemberReason",
    "MemberResult",
    "MemberSubmission",
    "MemoryStore",
    "make_store",
    "limits_from",
]
