"""Service settings: flags override environment variables (REWEIGHTER_*), which override defaults.

`REDIS_URL` is also read without the prefix, since that is the name compose files and
Kubernetes secrets conventionally use.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LongTextPolicy = Literal["head", "tail", "chunk_mean"]


class Settings(BaseSettings):
    # Empty variables count as unset: compose passes `${VAR:-}` through as "".
    model_config = SettingsConfigDict(
        env_prefix="REWEIGHTER_", extra="ignore", env_ignore_empty=True
    )

    # model
    model: str | None = Field(
        None, description="sentence-transformers name or path; None = bundled all-MiniLM-L6-v2"
    )
    device: str = Field("auto", description="'auto' (CUDA when present, else CPU), 'cpu', 'cuda:0'")
    long_text: LongTextPolicy = Field(
        "chunk_mean", description="how texts longer than the encoder window are embedded"
    )
    max_seq_length: int | None = Field(None, description="override the encoder window (tokens)")
    compile: Literal["auto", "on", "off"] = Field(
        "auto",
        description="torch.compile the encoder: 'auto' serves eager at once and swaps the "
        "compiled encoder in when it is warm (background); 'on' compiles before ready",
    )
    # batching
    max_batch_tokens: int | None = Field(
        None,
        description="token budget of one encoder batch (padded length x texts); "
        "None = per device: 2048 on CPU, 16384 on GPU",
    )
    max_batch_size: int = Field(64, description="at most this many sequences in one batch")
    max_queue: int = Field(1024, description="requests waiting or running before 429")
    slice_tokens: int | None = Field(
        None,
        description="tokens one request gets per scheduling round (fairness: a huge request "
        "is served in slices between others); None = per device: 1024 CPU, 32768 GPU",
    )

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_bool(cls, v: object) -> object:
        """REWEIGHTER_COMPILE=1/0 and true/false (the older boolean setting) still work."""
        words = {"1": "on", "true": "on", "yes": "on", "0": "off", "false": "off", "no": "off"}
        if isinstance(v, bool):
            return "on" if v else "off"
        return words.get(str(v).strip().lower(), v)
    # cache
    redis_url: str | None = Field(
        None, validation_alias=AliasChoices("REWEIGHTER_REDIS_URL", "REDIS_URL", "redis_url")
    )
    cache_ttl_s: int = Field(7 * 24 * 3600, description="Redis TTL of a cached embedding")
    cache_max_bytes: int = Field(256 * 2**20, description="in-process LRU cache bound; 0 disables")
    # limits (413 above these)
    max_groups: int = Field(1024, description="groups in one request")
    max_group_size: int = Field(512, description="completions in one group")
    max_completions: int = Field(8192, description="completions in one request, all groups")
    max_chars: int = Field(16_000_000, description="characters in one request, all completions")
    # group assembly: members of a group sent one at a time (docs/integrations.md)
    assembly_timeout_s: float = Field(
        300.0, description="how long a member waits for its group unless it asks otherwise"
    )
    assembly_max_timeout_s: float = Field(1800.0, description="cap on a member's timeout_s")
    assembly_result_ttl_s: float = Field(
        600.0, description="finished groups' answers are kept this long for retries"
    )
    assembly_max_open_groups: int = Field(16384, description="open groups before 429")
    assembly_max_held_members: int = Field(
        262144, description="members held in open groups (and waiting here) before 429"
    )
    assembly_prefix: str = Field("reweighter:asm:", description="Redis key prefix of assembly")
    # transport
    host: str = "127.0.0.1"
    http_port: int = 8080
    grpc_port: int = 50051
    api_key: str | None = Field(
        None, validation_alias=AliasChoices("REWEIGHTER_API_KEY", "api_key")
    )
    log_level: str = "info"
