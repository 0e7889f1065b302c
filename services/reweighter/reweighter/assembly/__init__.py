"""Group assembly: members of a group sent one at a time, reweighted once the group is whole.

See docs/integrations.md for the contract, failure modes and a sequence diagram.
"""

from __future__ import annotations

from ..config import Settings
from .assembler import AssemblyStats, GroupAssembler
from .store import AddOutcome, AssemblyStore, Limits, MemoryStore
from .types import MemberResult, MemberSubmission

# An open group outlives its last arrival by the longest wait plus this margin, so no waiter
# ever finds its group expired under it.
_OPEN_MARGIN_S = 10.0


def limits_from(settings: Settings) -> Limits:
    return Limits(
        max_open_groups=settings.assembly_max_open_groups,
        max_held_members=settings.assembly_max_held_members,
        open_ttl_s=settings.assembly_max_timeout_s + _OPEN_MARGIN_S,
        result_ttl_s=settings.assembly_result_ttl_s,
    )


def make_store(settings: Settings) -> AssemblyStore:
    """Redis when `redis_url` is set (replicas share groups), else this process's memory."""
    if settings.redis_url:
        from .redis_store import RedisStore

        return RedisStore(settings.redis_url, limits_from(settings), settings.assembly_prefix)
    return MemoryStore(limits_from(settings))


__all__ = [
    "AddOutcome",
    "AssemblyStats",
    "AssemblyStore",
    "GroupAssembler",
    "Limits",
    "MemberResult",
    "MemberSubmission",
    "MemoryStore",
    "make_store",
    "limits_from",
]
