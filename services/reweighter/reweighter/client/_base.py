"""The clients' one surface, declared once: `AsyncClientBase` (every async client: reweight,
embed, info, submit_member, close, the async context manager) and `Reweighter` (what the sync
clients offer and every integration calls); and the one set of defaults. A transport implements
`_answer` (one call of reweighter.wire.calls), `embed`, `info`, `_submit` (send one
MemberSubmission) and `close`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..types import (
    EmbedResult,
    EngineInfo,
    MemberResult,
    MemberSubmission,
    ReweightRequest,
    ReweightResult,
)
from ..wire.calls import Call, get_call

if TYPE_CHECKING:
    from .retry import RetryPolicy

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where `reweighter serve` listens by default (HTTP)."""
DEFAULT_GRPC_TARGET = "127.0.0.1:50051"
"""Its gRPC port by default."""
DEFAULT_TIMEOUT_S = 120.0
"""How long one reweight/embed/info call may take before the client gives up: a large batch of
long completions on a CPU service takes tens of seconds. Members wait by their own timeout_s."""
MEMBER_MARGIN_S = 30.0
"""A member's answer may come this long after its timeout_s (Redis, load): the client waits
timeout_s plus this before it gives up."""

C = TypeVar("C", bound="AsyncClientBase")


@runtime_checkable
class Reweighter(Protocol):
    """What an integration calls. ReweighterClient (HTTP), GrpcReweighterClient and LocalClient
    (in-process) implement it (client/_sync.SyncClient); for a whole batch, anything with
    `reweight` will do (a ReweightEngine)."""

    def reweight(self, request: ReweightRequest) -> ReweightResult: ...

    def info(self) -> EngineInfo: ...

    def call(self, name: str, request: Any) -> Any:
        """One call of reweighter.wire.calls by name (a route the recipe added, too)."""
        ...

    async def submit_member_async(self, *args: Any, **fields: Any) -> MemberResult:
        """One member (the arguments of MemberSubmission), awaitable from any event loop."""
        ...

    def close(self) -> None: ...


class AsyncClientBase:
    """Every async client: one per transport (HTTP, gRPC, in process)."""

    retry: RetryPolicy

    async def reweight(self, request: ReweightRequest) -> ReweightResult:
        return await self.call("reweight", request)  # type: ignore[no-any-return]

    async def call(self, name: str, request: Any) -> Any:
        """One request/answer call of the service by its name in reweighter.wire.calls
        ("reweight", or one the route recipe adds): its request message in, its result out."""
        return await self._answer(get_call(name), request)

    async def _answer(self, call: Call, request: Any) -> Any:
        raise NotImplementedError

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        raise NotImplementedError

    async def info(self) -> EngineInfo:
        raise NotImplementedError

    async def submit_member(self, *args: Any, **fields: Any) -> MemberResult:
        """Send one member of a group and wait for the group (docs/integrations.md): a
        MemberSubmission, or its fields (group_id, member_id, group_size, reward, then by
        keyword completion or embedding, method, params, advantages, timeout_s). Retried like
        every call: it is idempotent. The client waits timeout_s plus a margin, or without a
        deadline when timeout_s is None (the server answers by its own maximum)."""
        if len(args) == 1 and not fields and isinstance(args[0], MemberSubmission):
            sub = args[0]
        else:
            sub = MemberSubmission(*args, **fields)  # the server names a bad value
        deadline = None if sub.timeout_s is None else float(sub.timeout_s) + MEMBER_MARGIN_S
        return await self._submit(sub, deadline)

    async def _submit(self, sub: MemberSubmission, deadline: float | None) -> MemberResult:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: C) -> C:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
