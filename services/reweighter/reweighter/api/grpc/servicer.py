"""The Reweighter servicer: protobuf in, engine call, protobuf out; errors become status codes
with the error class and field in trailing metadata (the client rebuilds the same error).

The request/answer calls (reweighter.wire.calls: Reweight, and any the route recipe adds) are
served from their table entry, with no code here; Embed, Info and the member RPCs are written
out (their messages are still derived: reweighter.wire.grpc). A member is admitted in
`_submit`, which takes its pace turn (assembly/pace.py), the one the HTTP edge takes for
/v1/groups/.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ...assembly import GroupAssembler
from ...engine.surface import EngineSurface
from ...errors import NotReady, ReweighterError
from ...tenancy import Deadline, current_tenant, set_deadline
from ...types import EmbedRequest, MemberSubmission
from ...wire._proto.reweighter.v1 import reweighter_pb2 as pb
from ...wire._proto.reweighter.v1 import reweighter_pb2_grpc as pb_grpc
from ...wire.calls import CALLS, Call
from ...wire.grpc import (
    error_metadata,
    from_proto,
    member_error_to_proto,
    method_of,
    rpc_types,
    to_proto,
)
from ..metrics import Metrics

T = TypeVar("T")


class ReweighterServicer(pb_grpc.ReweighterServicer):
    """Translates protobuf to engine calls; errors become status codes naming the field."""

    def __init__(
        self, engine: EngineSurface, metrics: Metrics, assembler: GroupAssembler | None = None
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.assembler = assembler
        for call in CALLS.values():  # Reweight, and every call the route recipe adds
            setattr(self, call.rpc, self._rpc(call))

    def _rpc(self, call: Call) -> Callable[[Any, Any], Awaitable[Any]]:
        """The method of one call of the table: protobuf to its message, the engine coroutine,
        the answer's protobuf; metrics and errors through `_call`."""
        _, answer_class = rpc_types(call.rpc)

        async def rpc(msg: Any, context: Any) -> Any:
            async def run() -> Any:
                request = from_proto(msg, call.request)
                if call.size is not None:
                    self.metrics.completions.labels("grpc").observe(call.size(request))
                return to_proto(await getattr(self.engine, call.engine)(request), answer_class)

            return await self._call(context, call.name, method_of(msg), run)

        return rpc

    async def Embed(self, request: pb.EmbedRequest, context: Any) -> pb.EmbedResponse:
        async def run() -> pb.EmbedResponse:
            texts = from_proto(request, EmbedRequest).texts()
            return to_proto(await self.engine.aembed(texts), pb.EmbedResponse)

        return await self._call(context, "embed", "", run)

    async def Info(self, request: pb.InfoRequest, context: Any) -> pb.InfoResponse:
        async def run() -> pb.InfoResponse:
            return to_proto({**self.engine.info(), "tenant": current_tenant()}, pb.InfoResponse)

        return await self._call(context, "info", "", run)

    async def SubmitMember(self, request: pb.SubmitMemberRequest, context: Any) -> pb.MemberResult:
        return await self._call(
            context, "submit_member", method_of(request),
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
            try:
                with self.metrics.track("grpc", "submit_member", method_of(request)):
                    answer = await self._submit(request)
            except ReweighterError as e:
                answer = member_error_to_proto(request, e)
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
        """One member, unary or streamed: admitted here, where this transport takes the
        member's pace turn before converting it (as the HTTP edge does for /v1/groups/), so a
        burst of members goes through the loop in slices (assembly/pace.py); its answer takes
        the other turn, in its round."""
        if self.assembler is None:
            raise NotReady("group assembly is not running in this service")
        await self.assembler.pace.turn()
        sub = from_proto(request, MemberSubmission)
        return to_proto(await self.assembler.submit(sub), pb.MemberResult)

    async def _call(
        self, context: Any, endpoint: str, method: str, run: Callable[[], Awaitable[T]]
    ) -> T:
        remaining = getattr(context, "time_remaining", lambda: None)()
        if remaining is not None:  # the caller's deadline: dropped unserved past it
            set_deadline(Deadline(time.monotonic() + remaining))
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
        trailing_metadata=error_metadata(exc),
    )
