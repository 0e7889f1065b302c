"""Limits in one place: what the engine enforces (413), what the transports derive, and what
group assembly holds.

The engine checks a request's counts against `Limits` (from Settings); the transports refuse
bodies above `max_body_bytes` before parsing, so an oversized request costs no parsing. gRPC's
message limits and the clients' channel options are derived from the same numbers. The
assembly store is bounded by `AssemblyLimits` (429 Overloaded above them, retryable).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar, Self

from .config import Settings

CLIENT_MAX_MESSAGE_BYTES = 512 << 20
"""gRPC clients accept answers up to this size (embeddings of a large request)."""
SERVER_MIN_SEND_BYTES = 64 << 20
"""gRPC servers may always send answers of at least this size."""


class _FromSettings:
    """Limits read from Settings: each field is the setting of its name after the prefix, so a
    new limit is one field here and one setting, nothing to copy between them."""

    _SETTINGS_PREFIX: ClassVar[str] = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """Each field from the setting of its name (after the class's prefix)."""
        names = (f.name for f in fields(cls))  # type: ignore[arg-type]  # a dataclass
        return cls(**{n: getattr(settings, cls._SETTINGS_PREFIX + n) for n in names})


@dataclass(frozen=True)
class Limits(_FromSettings):
    """Per-request bounds (413 / RESOURCE_EXHAUSTED above them), as `info()` publishes them."""

    max_groups: int
    max_group_size: int
    max_completions: int
    max_chars: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class AssemblyLimits(_FromSettings):
    """What the assembly store holds at most, across replicas sharing it (a new group or member
    beyond a bound is refused with a retryable Overloaded), and how long an answered round's
    result is kept to answer retries."""

    max_open_groups: int
    max_held_members: int
    result_ttl_s: float

    _SETTINGS_PREFIX: ClassVar[str] = "assembly_"


def max_body_bytes(settings: Settings) -> int:
    """Bodies above this are refused before parsing: texts at 4 bytes per character plus room
    for precomputed embeddings written as JSON (about 24 bytes per number at 1024 dims)."""
    return 4 * settings.max_chars + 24 * 1024 * settings.max_completions + (1 << 20)


def grpc_server_options(settings: Settings) -> list[tuple[str, int]]:
    limit = max_body_bytes(settings)
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", max(limit, SERVER_MIN_SEND_BYTES)),
        ("grpc.so_reuseport", 0),
    ]


CLIENT_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", CLIENT_MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", CLIENT_MAX_MESSAGE_BYTES),
]
