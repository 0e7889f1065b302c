"""Service settings: flags override environment variables (REWEIGHTER_*), which override defaults.

`REDIS_URL` is also read without the prefix, since that is the name compose files and
Kubernetes secrets conventionally use.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .types import DEFAULT_LONG_TEXT, SPREAD_WINDOWS, WORD_CACHE_WORDS, LongTextPolicy

__all__ = ["LongTextPolicy", "OpenRLHFSettings", "Settings"]


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
        DEFAULT_LONG_TEXT,
        description="how texts longer than the encoder window are embedded: 'spread' (head, tail "
        "and evenly spaced windows, at most long_text_windows: a bounded cost; chosen by the "
        "class-agreement check, docs/embedding.md), 'chunk_mean' (every window), 'head', 'tail'",
    )
    long_text_windows: int = Field(
        SPREAD_WINDOWS,
        ge=2,
        description="with long_text=spread: the most windows one text is embedded from (head, "
        "tail and evenly spaced between), so its cost is bounded whatever its length",
    )
    max_seq_length: int | None = Field(None, description="override the encoder window (tokens)")
    word_cache: int = Field(
        WORD_CACHE_WORDS,
        ge=0,
        description="words whose token ids the tokenising lanes remember (plain-ASCII texts "
        "are tokenised a word at a time, each word once: ~4-6x less CPU on completions; "
        "~170 bytes a word; 0 turns it off; docs/embedding.md)",
    )
    compile: Literal["auto", "on", "off"] = Field(
        "auto",
        description="compile the encoder ahead of time (AOTInductor, in a child process; the "
        "package is kept in compile_cache_dir and loaded in ~0.1 s on the next start): 'auto' "
        "does so in the background (eager until it is in) on a GPU and on CPUs with AVX-512 at "
        "fp32, and stays eager on AVX2-only CPUs, where compiling measured slower; 'on' "
        "compiles before ready anywhere",
    )
    precision: Literal["auto", "fp32", "int8", "fp16", "bf16"] = Field(
        "auto",
        description="encoder precision: 'auto' = fp32 on CPU, fp16 on CUDA; 'int8' (CPU, the "
        "cpu-int8 extra) moves similarities by up to ~0.05; 'bf16' on CUDA or a CPU with "
        "native bf16 (docs/embedding.md, 'Precision')",
    )
    precision_cache_dir: str | None = Field(
        None,
        description="where the int8 model artefact is built on first start and kept; "
        "unset = $XDG_CACHE_HOME/reweighter or ~/.cache/reweighter",
    )
    compile_cache_dir: str | None = Field(
        None,
        description="where the compiled encoder (an AOTInductor package, built in a child "
        "process, keyed by model, weights, torch version and device) is kept and reused across "
        "restarts; unset = $XDG_CACHE_HOME/reweighter/compiled or ~/.cache/reweighter/compiled",
    )
    # batching
    max_batch_tokens: int | None = Field(
        None,
        description="token budget of one encoder batch (padded length x texts); "
        "unset = a per-device default (docs/embedding.md)",
    )
    max_batch_size: int = Field(64, description="at most this many sequences in one batch")
    max_queue: int = Field(1024, description="requests waiting or running before 429")
    slice_tokens: int | None = Field(
        None,
        description="a request with at most this many tokens left is served whole in the round "
        "it anchors; a round holds 4 x slice_tokens padded tokens, 5 x when it takes a left-over "
        "tail, run by the encoder as passes within max_batch_tokens and max_batch_size (one per "
        "round with the CPU defaults, 8 or more with the GPU's) (fairness: a huge request "
        "advances between others); while two or more tenants have work, a round holds one "
        "slice (a small request waits for at most one slice of another's work); unset = a "
        "per-device default (docs/embedding.md)",
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
        None,
        validation_alias=AliasChoices("REWEIGHTER_REDIS_URL", "REDIS_URL", "redis_url"),
        description="shared state (a noeviction Redis): group assembly, OpenRLHF rounds, "
        "outcome_ucb's answer memory; also the embedding cache unless cache_redis_url is "
        "given; unset = in process (also read as REWEIGHTER_REDIS_URL)",
    )
    # The embedding cache's own Redis: a cache may be evicted, the state on redis_url (assembly,
    # answer memory) must not be, and Redis evicts per instance (docs/operations.md, Redis).
    cache_redis_url: str | None = Field(
        None,
        description="the Redis of the embedding cache (allkeys-lru), apart from REDIS_URL's "
        "state (noeviction); unset = REDIS_URL",
    )
    cache_ttl_s: int = Field(7 * 24 * 3600, description="Redis TTL of a cached embedding")
    cache_max_bytes: int = Field(256 * 2**20, description="in-process LRU cache bound; 0 disables")
    # limits (413 above these)
    max_groups: int = Field(1024, description="groups in one request")
    max_group_size: int = Field(512, description="completions in one group")
    max_completions: int = Field(8192, description="completions in one request, all groups")
    max_chars: int = Field(
        4_000_000,
        description="characters in one request, all completions (~1M tokens: minutes of CPU "
        "encoding, served in slices between other requests; docs/operations.md)",
    )
    dashboard_steps: int = Field(
        500, ge=1, description="steps per training job the dashboard keeps (GET /dashboard)"
    )
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
        262144,
        description="members held in open groups (and waiting here) before 429; each costs "
        "about 6.5 KB of this process's memory plus its text (or 32 B per embedding dimension), "
        "and about 27 KB more while it waits over HTTP: the default is about 1.7 GB before texts "
        "(docs/operations.md, sizing assembly_max_held_members)",
    )
    memory_ttl_s: float = Field(
        30 * 24 * 3600.0,
        gt=0,
        description="outcome_ucb's answer memory: a prompt key not written this long is forgotten",
    )
    memory_max_prompt_keys: int = Field(
        1_000_000,
        ge=1,
        description="outcome_ucb's answer memory: prompt keys held at most (least recently "
        "written dropped first)",
    )
    memory_prefix: str = Field("reweighter:mem:", description="Redis key prefix of the memory")
    assembly_prefix: str = Field("reweighter:asm:", description="Redis key prefix of assembly")
    # OpenRLHF remote reward route (api/http/openrlhf.py): the openrlhf_* group, read by the
    # route through the typed view `Settings.openrlhf`, never field by field
    openrlhf_n: int | None = Field(
        None, ge=1, description="group size (n_samples_per_prompt) when the URL has no ?n="
    )
    openrlhf_upstream_url: str | None = Field(
        None, description="base rewards from this OpenRLHF reward URL instead of the math checker"
    )
    openrlhf_token: str | None = Field(
        None,
        repr=False,
        description="secret of the route /v1/openrlhf/<token>/reward, for OpenRLHF's client, "
        "which sends no headers (docs/integrations.md); needs its own value, not the API key",
    )
    openrlhf_timeout_s: float = Field(
        150.0, gt=0, lt=180, description="how long an OpenRLHF sample waits for its group "
        "(OpenRLHF gives up on a request after 180 s)",
    )
    # connections (docs/operations.md): a flood of idle or slow clients must not lock others out
    max_connections: int = Field(
        16384,
        description="open HTTP connections (and concurrent gRPC calls); at the bound a new "
        "connection closes the oldest idle one, or gets 429 when none is idle. Waiting "
        "group-assembly members each hold one, so keep it above the members you expect",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, le=30, description="a connection must send a complete request head in this"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, le=30, description="a request body must arrive within this of its head"
    )
    keepalive_timeout_s: float = Field(
        5.0, gt=0, le=30, description="an idle keep-alive connection is closed after this"
    )
    # transport
    host: str = Field("127.0.0.1", description="address both transports bind")
    http_port: int = Field(8080, description="HTTP port; 0 picks a free one")
    grpc_port: int = Field(50051, description="gRPC port; 0 picks a free one")
    tls_cert_file: str | None = Field(
        None,
        description="TLS certificate chain (PEM) served on both ports, HTTPS and gRPC over TLS; "
        "with tls_key_file, both or neither; unset = plain (docs/service.md, TLS)",
    )
    tls_key_file: str | None = Field(
        None, description="private key (PEM) of tls_cert_file; both or neither"
    )
    api_key: str | None = Field(
        None,
        validation_alias=AliasChoices("REWEIGHTER_API_KEY", "api_key"),
        description="bearer token clients send (HTTP authorization header, gRPC metadata); "
        "unset = open (or the keys of tenants). Prefer the environment: flags show in ps",
    )
    tenants: str | None = Field(
        None,
        description="tenants file (JSON or YAML): one service for many training jobs, each "
        "with its key, weight and max_queued (docs/operations.md); reloaded on SIGHUP",
    )
    log_level: str = Field("info", description="debug | info | warning | error")

    @property
    def embedding_cache_url(self) -> str | None:
        """Where the embedding cache lives: `cache_redis_url`, else the state's `redis_url` (one
        Redis for both still works; docs/operations.md says what it risks)."""
        return self.cache_redis_url or self.redis_url

    @property
    def openrlhf(self) -> OpenRLHFSettings:
        """The OpenRLHF route's settings as one typed group."""
        return OpenRLHFSettings(
            n=self.openrlhf_n,
            upstream_url=self.openrlhf_upstream_url,
            token=self.openrlhf_token,
            timeout_s=self.openrlhf_timeout_s,
        )


@dataclasses.dataclass(frozen=True)
class OpenRLHFSettings:
    """The OpenRLHF route's settings (env REWEIGHTER_OPENRLHF_*, flags --openrlhf-*)."""

    n: int | None = None
    upstream_url: str | None = None
    token: str | None = dataclasses.field(default=None, repr=False)
    timeout_s: float = 150.0


# -- command-line flags, generated from the fields above -------------------------------------

_ENV_NAMES = {"redis_url": "REDIS_URL"}


def add_settings_flags(
    parser: argparse.ArgumentParser, fields: Iterable[str] | None = None
) -> argparse.ArgumentParser:
    """One flag per Settings field (--http-port, --long-text, ...), typed from its annotation:
    enums and Literals become choices, `--compile` takes an optional value (alone: on) and has
    `--no-compile`. Unset flags fall back to the environment (REWEIGHTER_*), then the default."""
    for name in fields or Settings.model_fields:
        field = Settings.model_fields[name]
        kind, choices = _flag_type(field.annotation)
        env = _ENV_NAMES.get(name, f"REWEIGHTER_{name.upper()}")
        default = "unset" if field.default is None else _show(field.default)
        flag = f"--{name.replace('_', '-')}"
        text = f"{field.description or name.replace('_', ' ')} (env {env}; default {default})"
        if name == "compile":
            parser.add_argument(flag, dest=name, nargs="?", const="on", choices=choices,
                                default=None, help=text)  # fmt: skip
            parser.add_argument("--no-compile", dest=name, action="store_const", const="off",
                                help="same as --compile off")  # fmt: skip
            continue
        parser.add_argument(flag, dest=name, type=kind, choices=choices, default=None, help=text)
    return parser


def settings_from_args(args: argparse.Namespace, **extra: Any) -> Settings:
    """Settings from parsed flags: only the flags given override the environment."""
    overrides = {
        name: getattr(args, name)
        for name in Settings.model_fields
        if getattr(args, name, None) is not None
    }
    return Settings(**{**overrides, **extra})


def _show(value: object) -> str:
    return value.value if isinstance(value, enum.Enum) else str(value)


def _flag_type(annotation: Any) -> tuple[type, list[str] | None]:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return str, [m.value for m in annotation]
    if typing.get_origin(annotation) is typing.Literal:
        return str, list(typing.get_args(annotation))
    if annotation in (int, str, float):
        return annotation, None
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _flag_type(args[0])
    return str, None
