"""A gRPC interceptor that answers request bytes which do not parse as the declared message with
INVALID_ARGUMENT, as any other bad input (an InvalidInput: its type in the trailing metadata),
instead of grpc's UNKNOWN naming a DecodeError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from ...errors import InvalidInput
from .servicer import abort


class _Undecodable:
    """What an unparseable request becomes, so that the handler can refuse it cleanly."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _tolerant(parse: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if parse is None:
        return None

    def tolerant(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as e:  # DecodeError and friends: the client's bytes, not our bug
            return _Undecodable(e)

    return tolerant


def _refusal(bad: _Undecodable) -> InvalidInput:
    return InvalidInput(f"the request is not a valid protobuf message of this method: {bad.error}")


class DecodeGuard(grpc.aio.ServerInterceptor):
    """Requests that do not decode get INVALID_ARGUMENT before the servicer sees them.

    Unary calls are refused outright. On the member stream (stream-stream), the messages before
    the bad one are served and answered as usual; the stream then ends with INVALID_ARGUMENT
    instead of grpc's UNKNOWN, and nothing after the bad message is read.
    """

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        tolerant = _tolerant(handler.request_deserializer)
        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(request: Any, context: Any) -> Any:
                if isinstance(request, _Undecodable):
                    await abort(context, _refusal(request))
                return await inner(request, context)

            return handler._replace(unary_unary=unary, request_deserializer=tolerant)
        if handler.stream_stream is not None:
            streamed = handler.stream_stream

            async def stream(requests: Any, context: Any) -> Any:
                bad: list[_Undecodable] = []

                async def decoded() -> Any:
                    async for request in requests:
                        if isinstance(request, _Undecodable):
                            bad.append(request)
                            return
                        yield request

                async for answer in streamed(decoded(), context):
                    yield answer
                if bad:
                    await abort(context, _refusal(bad[0]))

            return handler._replace(stream_stream=stream, request_deserializer=tolerant)
        return handler
