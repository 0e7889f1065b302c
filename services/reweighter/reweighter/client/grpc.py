"""gRPC clients (sync and grpc.aio) returning the engine's result types.

Retries (backoff with jitter) on UNAVAILABLE (restarting, loading) and on RESOURCE_EXHAUSTED
only when the server says it is overloaded: a request over the size limits fails at once.
Errors are raised as the server's reweighter.errors class, rebuilt from trailing metadata.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import grpc

from ..api import convert
from ..api._proto.reweighter.v1 import reweighter_pb2 as pb
from ..api._proto.reweighter.v1 import reweighter_pb2_grpc as pb_grpc
from ..errors import ReweighterError
from ..types import EmbedResult, ReweightRequest, ReweightResult
from ._retry import ConnectionFailed, RetryPolicy

_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 512 << 20),
    ("grpc.max_receive_message_length", 512 << 20),
]


def _metadata(api_key: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_key}"),) if api_key else ()


def _error(e: grpc.RpcError) -> ReweighterError:
    code = e.code() if hasattr(e, "code") else None
    trailing = dict(e.trailing_metadata() or ()) if hasattr(e, "trailing_metadata") else {}
    kind = trailing.get(convert.ERROR_TYPE_KEY)
    field = trailing.get(convert.ERROR_FIELD_KEY)
    details = (e.details() if hasattr(e, "details") else None) or str(e)
    if field and details.startswith(f"{field}: "):
        details = details[len(field) + 2 :]
    if kind is None:
        if code == grpc.StatusCode.UNAVAILABLE:
            return ConnectionFailed(details)
        err = ReweighterError(f"{code.name if code else 'gRPC error'}: {details}")
        if code is not None:
            err.grpc_code = code.name
        return err
    return convert.error_from(kind, details, field)


def _retryable(e: grpc.RpcError) -> bool:
    code = e.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        trailing = dict(e.trailing_metadata() or ())
        return trailing.get(convert.ERROR_TYPE_KEY) == "Overloaded"
    return False


class GrpcReweighterClient:
    """Synchronous client for the reweighter.v1.Reweighter service.

    with GrpcReweighterClient("127.0.0.1:50051") as client:
        result = client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._metadata = _metadata(api_key)
        self._channel = (
            grpc.secure_channel(target, credentials, options=_CHANNEL_OPTIONS)
            if credentials
            else grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        )
        self._stub = pb_grpc.ReweighterStub(self._channel)

    def reweight(self, request: ReweightRequest) -> ReweightResult:
        msg = convert.request_to_proto(request)
        return convert.proto_to_result(self._call(self._stub.Reweight, msg))

    def embed(self, texts: Sequence[str]) -> EmbedResult:
        msg = pb.EmbedRequest(inputs=list(texts))
        return convert.proto_to_embed(self._call(self._stub.Embed, msg))

    def info(self) -> dict[str, Any]:
        return convert.proto_to_info(self._call(self._stub.Info, pb.InfoRequest()))

    def _call(self, rpc: Any, msg: Any) -> Any:
        for attempt in range(self.retry.retries + 1):
            try:
                return rpc(msg, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                if attempt == self.retry.retries or not _retryable(e):
                    raise _error(e) from None
                time.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> GrpcReweighterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncGrpcReweighterClient:
    """The grpc.aio twin of GrpcReweighterClient; create it inside the event loop that uses it."""

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._metadata = _metadata(api_key)
        self._channel = (
            grpc.aio.secure_channel(target, credentials, options=_CHANNEL_OPTIONS)
            if credentials
            else grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS)
        )
        self._stub = pb_grpc.ReweighterStub(self._channel)

    async def reweight(self, request: ReweightRequest) -> ReweightResult:
        msg = convert.request_to_proto(request)
        return convert.proto_to_result(await self._call(self._stub.Reweight, msg))

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        msg = pb.EmbedRequest(inputs=list(texts))
        return convert.proto_to_embed(await self._call(self._stub.Embed, msg))

    async def info(self) -> dict[str, Any]:
        return convert.proto_to_info(await self._call(self._stub.Info, pb.InfoRequest()))

    async def _call(self, rpc: Any, msg: Any) -> Any:
        for attempt in range(self.retry.retries + 1):
            try:
                return await rpc(msg, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                if attempt == self.retry.retries or not _retryable(e):
                    raise _error(e) from None
                await asyncio.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncGrpcReweighterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
