"""The Reweighter servicer: protobuf in, engine call, protobuf out; errors become status codes
with the error class and field in trailing metadata (the client rebuilds the same error).

To add an RPC: define it in proto/reweighter/v1/*.proto, regenerate the stubs
(scripts/gen_proto.py), add its conversions to convert.py, and a method here that runs through
`_call` (metrics and error mapping come with it); the gRPC client gets the matching method.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ...assembly import GroupAssembler
from ...errors import NotReady, ReweighterError
from .._proto.reweighter.v1 import reweighter_pb2 as pb
from .._proto.reweighter.v1 import reweighter_pb2_grpc as pb_grpc
from ..metrics import Metrics
from ..protocol import EngineProtocol
from . import convert

T = TypeVar("T")


class ReweighterServicer(pb_grpc.ReweighterServicer):
    """Translates protobuf to engine calls; errors become status codes naming the field."""

    def __init__(
        self, engine: EngineProtocol, metrics: Metrics, assembler: GroupAssembler | None = None
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.assembler = assembler

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

    async def SubmitMember(self, request: pb.SubmitMemberRequest, context: Any) -> pb.MemberResult:
        return await self._call(
            context, "submit_member", request.method or convert.DEFAULT_METHOD,
            lambda: self._submit(request),
        )  # fmt: skip

    async def SubmitMembers(
        self, requests: AsyncIterator[pb.SubmitMemberRequest], context: Any
    ) -> AsyncIterator[pb.MemberResult]:
        """Each member waits in its own task; answers go out as groups complete. A member's
        error is its answer (`error` set), so one bad member does not end the stream."""
        answers: asyncio.Queue[pb.MemberResult | None] = asyncio.Queue()
        tasks: set[asyncio.Task[None]] = set()

        async def one(request: pb.SubmitMemberRequest) -> None:
            method = request.method or convert.DEFAULT_METHOD
            try:
                with self.metrics.track("grpc", "submit_member", method):
                    answer = await self._submit(request)
            except ReweighterError as e:
                answer = convert.member_error_to_proto(request, e)
            await answers.put(answer)

        async def read() -> None:
            async for request in requests:
                task = asyncio.create_task(one(request))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
            await answers.put(None)

        reader = asyncio.create_task(read())
        try:
            while (answer := await answers.get()) is not None:
                yield answer
            await reader
        finally:
            reader.cancel()
            for task in list(tasks):
                task.cancel()

    async def _submit(self, request: pb.SubmitMemberRequest) -> pb.MemberResult:
        if self.assembler is None:
            raise NotReady("group assembly is not running in this service")
        sub = convert.proto_to_submission(request)
        return convert.member_result_to_proto(await self.assembler.submit(sub))

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
