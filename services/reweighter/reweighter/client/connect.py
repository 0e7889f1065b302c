"""One way to connect: a URL in, a client out, for every integration and the trainer.

    client = connect("http://reweighter:8080")      # or https://, grpc://, grpcs://, inprocess://
    client.reweight(request)                         # a whole batch (TRL, slime, SkyRL)
    await client.submit_member_async(...)            # one member, from any event loop (verl)

Every client `connect` returns implements `Reweighter`, the one surface an integration calls;
the defaults (URL, ports, timeout) live in client/_base.py and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..types import (
    AdvantageKind,
    EngineInfo,
    MemberResult,
    Method,
    ReweightRequest,
    ReweightResult,
)
from ._base import DEFAULT_TIMEOUT_S, DEFAULT_URL
from .retry import RetryPolicy

if TYPE_CHECKING:
    from ..config import Settings

SCHEMES = ("http://", "https://", "grpc://", "grpcs://", "inprocess://")
INPROCESS = "inprocess"
"""The bare word, as TRL's `reweighted(backend="inprocess")` and the trainer config spell it."""


@runtime_checkable
class Reweighter(Protocol):
    """What an integration calls. ReweighterClient (HTTP), GrpcReweighterClient and LocalClient
    (in-process) implement it; for a whole batch, anything with `reweight` will do (a
    ReweightEngine)."""

    def reweight(self, request: ReweightRequest) -> ReweightResult: ...

    def info(self) -> EngineInfo: ...

    async def submit_member_async(
        self,
        group_id: str,
        member_id: str,
        group_size: int,
        reward: float,
        *,
        completion: str | None = None,
        embedding: Sequence[float] | None = None,
        method: Method | str = ...,
        params: Mapping[str, Any] | None = None,
        advantages: AdvantageKind | str = ...,
        timeout_s: float | None = None,
    ) -> MemberResult: ...

    def close(self) -> None: ...


def connect(
    url: str = DEFAULT_URL,
    *,
    api_key: str | None = None,
    timeout_s: float | None = None,
    retry: RetryPolicy | None = None,
    settings: Settings | Mapping[str, Any] | None = None,
) -> Reweighter:
    """A client for `url`: "http(s)://host:port[/prefix]", "grpc://host:port", "grpcs://host:port"
    (TLS with the system roots) or "inprocess://" (also "inprocess": the engine in this process,
    built on first use from `settings`, a Settings or overrides of the environment's, e.g.
    {"long_text": "tail"}; needs `reweighter[server]`).

    `timeout_s` bounds each reweight/embed/info call over the network (default
    DEFAULT_TIMEOUT_S); members wait by their own `timeout_s`. In process there is no network
    to wait for, so `timeout_s` and `api_key` do not apply there: a call runs to completion (or
    raises). The HTTP client also has `ready`/`wait_ready`."""
    timeout = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
    if url.startswith(("http://", "https://")):
        from .http import ReweighterClient

        return ReweighterClient(url, api_key=api_key, timeout=timeout, retry=retry)
    if url.startswith(("grpc://", "grpcs://")):
        from .grpc import GrpcReweighterClient

        secure = url.startswith("grpcs://")
        target = url.split("://", 1)[1].rstrip("/")
        credentials = None
        if secure:
            import grpc

            credentials = grpc.ssl_channel_credentials()
        return GrpcReweighterClient(
            target, api_key=api_key, timeout=timeout, retry=retry, credentials=credentials
        )
    if url in (INPROCESS, "inprocess://"):
        from .local import LocalClient

        return LocalClient(settings=settings, retry=retry)
    raise ValueError(
        f"reweighter url {url!r}: expected http://host:port, https://host:port, "
        "grpc://host:port, grpcs://host:port or inprocess://"
    )
