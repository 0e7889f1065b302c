"""A gRPC interceptor that answers request bytes which do not parse as the declared message with
INVALID_ARGUMENT, as any other bad input, instead of grpc's UNKNOWN naming a DecodeError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc


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


class DecodeGuard(grpc.aio.ServerInterceptor):
    """Unary calls whose request does not decode get INVALID_ARGUMENT before the servicer."""

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        async def unary(request: Any, context: Any) -> Any:
            if isinstance(request, _Undecodable):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the request is not a valid protobuf message of this method: {request.error}",
                )
            return await inner(request, context)

        return handler._replace(
            unary_unary=unary, request_deserializer=_tolerant(handler.request_deserializer)
        )
