"""The records both stores hold, typed and versioned.

Two replicas sharing a Redis during a rolling upgrade may run different versions of this
module. Every record carries `v`; a reader meeting another version refuses it with a retryable
503 (`StoreUnavailable`, the class clients know) naming both versions, so the member is
retried (it may reach a replica of the other version, which can read it) and nothing is
misread. A group opened by one version therefore completes on replicas of that version; when
the old ones are gone, their records expire with their TTLs. Bump SCHEMA_VERSION on any change
to these models; a deployment that wants the versions fully apart can also change
`assembly_prefix` with the upgrade.

The in-process store keeps the objects; the Redis store keeps `dump()` strings, canonical (sorted
keys) so that equal metas are equal strings for its Lua scripts.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import StoreUnavailable

SCHEMA_VERSION = 1


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int = SCHEMA_VERSION

    def dump(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @classmethod
    def load(cls, raw: str | bytes) -> Self:
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise StoreUnavailable(f"unreadable {cls.__name__} in the assembly store") from e
        version = data.get("v") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise StoreUnavailable(
                f"the assembly store holds a {cls.__name__} of schema version {version!r}; "
                f"this replica reads version {SCHEMA_VERSION} (a rolling upgrade?): retry, or "
                "give each version its own assembly_prefix"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise StoreUnavailable(f"malformed {cls.__name__} in the assembly store") from e


class GroupMeta(_Record):
    """What every member of a round must agree on (field names are the member's fields)."""

    group_size: int
    method: str
    params: dict[str, Any]
    """After validation, defaults filled in: `{}` and the explicit defaults are equal."""
    advantages: str
    input: Literal["completion", "embedding"]
    dim: int | None
    """The embedding width; None for completions."""


class MemberRecord(_Record):
    reward: float
    digest: str
    """sha256 of the completion (UTF-8) or of the float32 embedding: retries are compared by it."""
    value: str | list[float]
    """The completion or the embedding."""


class RoundResult(_Record):
    """A round's answer for all its members: reweighted when complete, raw when it closed short
    at a deadline (then `ids` are the members present)."""

    round: int
    meta: GroupMeta
    complete: bool
    ids: list[str]
    """In member_id string order; every list below follows it."""
    raw: list[float]
    digests: list[str]
    rewards: list[float]
    advantages: list[float] | None
    mean_similarity: float | None
    lambda_: float | None


class OpenRound(BaseModel):
    """An open round as `AssemblyStore.members` reads it (not stored as such)."""

    model_config = ConfigDict(frozen=True)

    round: int
    meta: GroupMeta
    members: dict[str, MemberRecord]


__all__ = [
    "SCHEMA_VERSION",
    "GroupMeta",
    "MemberRecord",
    "OpenRound",
    "RoundResult",
]
