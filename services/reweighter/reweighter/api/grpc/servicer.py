"""The Reweighter servicer: protobuf in, engine call, protobuf out; errors become status codes
with the error class and field in trailing metadata (the client rebuilds the same error).

To add an RPC: define it in proto/reweighter/v1/*.proto, regenerate the stubs
(scripts/gen_proto.py), add its conversions to convert.py, and a method here that runs through
`_call` (metrics and error mapping come with it); the gRPC client gets the matching method.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ...errors import ReweighterError
from .._proto.reweighter.v1 import reweighter_pb2 as pb
from .._proto.reweighter.v1 import reweighter_pb2_grpc as pb_grpc
from ..metrics import Metrics
from ..protocol import EngineProtocol
from . import convert

T = TypeVar("T")


class ReweighterServicer(pb_grpc.ReweighterServicer):
    """Translates protobuf to engine calls; errors become status codes naming the field."""

    def __init__(self, engine: EngineProtocol, metrics: Metrics) -> None:
        self.engine = engine
        self.metrics = metrics

    async def Reweight(self, request: pb.ReweightRequest, context: Any) -> pb.ReweightResponse:
        async def run() -> pb.ReweightResponse:
            req = convert.proto_to_request(request)
            n = sum(len(g.rewards) for g in request.groups)
            self.metrics.completions.labels("grpc").observe(n)
            return convert.result_to_proto(await self.engine.areweight(req))

        return await self._call(context, "reweight", request.method or convert.DEFAULT_METHOD, run)

    async def Embed(self, request: pb.EmbedRequest, context: Any) -> pb.EmbedResponse:
        async def run() -> pb.EmbedResponse:
            texts = convert.proto_embed_inputs(request)
            return convert.embed_to_proto(await self.engine.aembed(texts))

        return await self._call(context, "embed", "", run)

    async def Info(self, request: pb.InfoRequest, context: Any) -> pb.InfoResponse:
        async def run() -> pb.InfoResponse:
            return convert.info_to_proto(self.engine.info())

        return await self._call(context, "info", "", run)

    async def _call(
        self, context: Any, endpoint: str, method: str, run: Callable[[], Awaitable[T]]
    ) -> T:
        try:
            with self.metrics.track("grpc", endpoint, method):
                return await run()
        except ReweighterError as e:
            await abort(context, e)
        raise AssertionError("unreachable: context.abort raises")


async def abort(context: Any, exc: ReweighterError) -> None:
    """End the call with the error's status, message and trailing metadata (class, field)."""
    await context.abort(
        getattr(grpc.StatusCode, exc.grpc_code),
        str(exc),
        trailing_metadata=convert.error_metadata(exc),
    )
