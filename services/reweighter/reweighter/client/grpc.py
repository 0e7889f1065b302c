"""The gRPC client (grpc.aio), async, and its sync wrapper; both return the engine's result types.

Errors are raised as the server's reweighter.errors class, rebuilt from trailing metadata
(reweighter.wire.grpc). Retries as in client/retry.py: UNAVAILABLE (restarting, loading) and
RESOURCE_EXHAUSTED only when the server says it is overloaded; a request over the size limits
fails at once.
"""

from __future__ import annotations

from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Sequence,
)
from typing import Any, TypeVar

import grpc

from ..errors import ReweighterError
from ..limits import CLIENT_CHANNEL_OPTIONS
from ..types import (
    EmbedRequest,
    EmbedResult,
    EngineInfo,
    MemberResult,
    MemberSubmission,
)
from ..wire._proto.reweighter.v1 import reweighter_pb2 as pb
from ..wire._proto.reweighter.v1 import reweighter_pb2_grpc as pb_grpc
from ..wire.calls import Call
from ..wire.grpc import (
    error_from_rpc,
    from_proto,
    member_error,
    rpc_types,
    to_proto,
)
from ._base import DEFAULT_GRPC_TARGET, DEFAULT_TIMEOUT_S, AsyncClientBase
from ._sync import SyncClient
from .retry import RetryPolicy

R = TypeVar("R")


class AsyncGrpcReweighterClient(AsyncClientBase):
    """Client for the reweighter.v1.Reweighter service; create it inside the loop that uses it.

    async with AsyncGrpcReweighterClient("127.0.0.1:50051") as client:
        result = await client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

    def __init__(
        self,
        target: str = DEFAULT_GRPC_TARGET,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self._channel = (
            grpc.aio.secure_channel(target, credentials, options=CLIENT_CHANNEL_OPTIONS)
            if credentials
            else grpc.aio.insecure_channel(target, options=CLIENT_CHANNEL_OPTIONS)
        )
        self._stub = pb_grpc.ReweighterStub(self._channel)

    async def _answer(self, call: Call, request: Any) -> Any:
        request_class, _ = rpc_types(call.rpc)
        answer = await self._call(getattr(self._stub, call.rpc), to_proto(request, request_class))
        return from_proto(answer, call.result)

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        msg = to_proto(EmbedRequest(list(texts)), pb.EmbedRequest)
        return from_proto(await self._call(self._stub.Embed, msg), EmbedResult)

    async def info(self) -> EngineInfo:
        return from_proto(await self._call(self._stub.Info, pb.InfoRequest()), EngineInfo)

    async def _submit(self, sub: MemberSubmission, deadline: float | None) -> MemberResult:
        msg = to_proto(sub, pb.SubmitMemberRequest)
        answer = await self._call(self._stub.SubmitMember, msg, timeout=deadline)
        return from_proto(answer, MemberResult)  # unary errors come as the call's status

    async def submit_members(
        self, members: Iterable[MemberSubmission] | AsyncIterable[MemberSubmission]
    ) -> AsyncIterator[MemberResult | ReweighterError]:
        """Many members over one SubmitMembers stream; yields each member's result (or its
        error, as the server's class) as its group completes: match by group_id, member_id.
        Not retried: resend the members that got a retryable error."""

        async def requests() -> AsyncIterator[Any]:
            if isinstance(members, AsyncIterable):
                async for m in members:
                    yield to_proto(m, pb.SubmitMemberRequest)
            else:
                for m in members:
                    yield to_proto(m, pb.SubmitMemberRequest)

        call = self._stub.SubmitMembers(requests(), metadata=self._metadata)
        try:
            async for msg in call:
                yield member_error(msg) or from_proto(msg, MemberResult)
        except grpc.RpcError as e:
            raise error_from_rpc(e) from None

    async def _call(
        self, rpc: Callable[..., Awaitable[R]], msg: Any, timeout: float | None | bool = False
    ) -> R:
        deadline = self.timeout if timeout is False else timeout
        async for attempt in self.retry.attempts():
            with attempt:
                try:
                    answer = await rpc(msg, timeout=deadline, metadata=self._metadata)
                except grpc.RpcError as e:
                    raise error_from_rpc(e) from None
        return answer

    async def close(self) -> None:
        await self._channel.close()


class GrpcReweighterClient(SyncClient[AsyncGrpcReweighterClient]):
    """The synchronous gRPC client: AsyncGrpcReweighterClient on a private loop.

    with GrpcReweighterClient("127.0.0.1:50051") as client:
        result = client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

    async_class = AsyncGrpcReweighterClient  # takes its arguments

    def submit_members(
        self, members: Iterable[MemberSubmission]
    ) -> list[MemberResult | ReweighterError]:
        """All members over one stream; every result (or error), in completion order."""

        async def collect() -> list[MemberResult | ReweighterError]:
            return [r async for r in self.aio.submit_members(list(members))]

        return self._run(collect())
