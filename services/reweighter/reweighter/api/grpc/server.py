"""The gRPC server (grpc.aio): the Reweighter servicer, standard health, reflection and the
API-key check, bound with the message limits of reweighter.limits."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ...assembly import GroupAssembler
from ...config import Settings
from ...engine.surface import EngineSurface
from ...errors import Unauthenticated
from ...limits import grpc_server_options
from ...tenancy import DEFAULT, Tenant, Tenants, enter
from ...tls import server_tls
from ...wire._proto.reweighter.v1 import reweighter_pb2 as pb
from ...wire._proto.reweighter.v1 import reweighter_pb2_grpc as pb_grpc
from ..metrics import Metrics
from .guard import DecodeGuard
from .servicer import ReweighterServicer, abort

log = logging.getLogger(__name__)

_SERVICE = pb.DESCRIPTOR.services_by_name["Reweighter"]
SERVICE_NAME = _SERVICE.full_name
_PROTECTED_PREFIX = f"/{SERVICE_NAME}/"


class _ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for Reweighter calls without a tenant's key; health and reflection stay
    open. The caller's tenant is set for the servicer (reweighter.tenancy.current_tenant)."""

    def __init__(self, tenants: Tenants, metrics: Metrics) -> None:
        self.tenants = tenants
        self.metrics = metrics

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[override]
        method = handler_call_details.method
        if not method.startswith(_PROTECTED_PREFIX):
            return await continuation(handler_call_details)
        header = dict(handler_call_details.invocation_metadata or ()).get("authorization")
        try:
            tenant = self.tenants.table.resolve_bearer(header)
        except Unauthenticated as e:
            self.metrics.count_rejected(
                "grpc", method.rsplit("/", 1)[-1].lower(), "Unauthenticated"
            )
            return _deny(e, streaming=method.endswith("/SubmitMembers"))
        return _as_tenant(await continuation(handler_call_details), tenant)


def _as_tenant(handler: Any, tenant: Tenant) -> Any:
    """`handler` run as `tenant` (set in the handler's own task, whatever runs interceptors)."""
    if handler is None or tenant == DEFAULT:
        return handler
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary(request: Any, context: Any) -> Any:
            enter(tenant)
            return await inner(request, context)

        return handler._replace(unary_unary=unary)
    if handler.stream_stream is not None:
        streamed = handler.stream_stream

        async def stream(requests: Any, context: Any) -> Any:
            enter(tenant)
            async for answer in streamed(requests, context):
                yield answer

        return handler._replace(stream_stream=stream)
    return handler


def _deny(exc: Unauthenticated, *, streaming: bool = False) -> grpc.RpcMethodHandler:
    async def deny(request: Any, context: Any) -> None:
        await abort(context, exc)

    async def deny_stream(requests: Any, context: Any) -> None:
        # read the first message before aborting: ending the call while the client is still
        # writing its first message surfaces there as INTERNAL instead of UNAUTHENTICATED
        async for _ in requests:
            break
        await abort(context, exc)

    if streaming:  # the handler's shape must match the RPC's (SubmitMembers: stream-stream)
        return grpc.stream_stream_rpc_method_handler(deny_stream)
    return grpc.unary_unary_rpc_method_handler(deny)


class GrpcServer:
    """A grpc.aio server with the Reweighter service, standard health and reflection.

    Health reports NOT_SERVING until `mark_serving()` (called once the model is loaded) and
    again during shutdown, so load balancers drain the instance before it stops.
    """

    def __init__(
        self,
        engine: EngineSurface,
        settings: Settings,
        metrics: Metrics,
        assembler: GroupAssembler | None = None,
        tenants: Tenants | None = None,
    ) -> None:
        self.tenants = tenants if tenants is not None else Tenants.from_settings(settings)
        metrics.watch_tenants(self.tenants)
        # an open service (no key, no file) stays open: a reload needs a file, and a file's
        # table is never open
        interceptors: list[Any] = []
        if not self.tenants.table.open:
            interceptors.append(_ApiKeyInterceptor(self.tenants, metrics))
        interceptors.append(DecodeGuard())  # after the key: no decoding for strangers
        self.server = grpc.aio.server(
            interceptors=interceptors,
            options=grpc_server_options(settings),
            # beyond this many calls at once: RESOURCE_EXHAUSTED (docs/operations.md)
            maximum_concurrent_rpcs=settings.max_connections,
        )
        self.engine = engine
        self.health = health.aio.HealthServicer()
        servicer = ReweighterServicer(engine, metrics, assembler)
        # the labels of calls refused before the servicer (the key check): the RPCs' names
        metrics.allow_endpoints(m.name.lower() for m in _SERVICE.methods)
        pb_grpc.add_ReweighterServicer_to_server(servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            [SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME], self.server
        )
        host = settings.host
        address = f"[{host}]" if ":" in host and not host.startswith("[") else host
        tls = server_tls(settings)  # refused naming the setting: reweighter/tls.py
        self.tls = tls is not None
        bind = f"{address}:{settings.grpc_port}"
        try:
            if tls is None:
                self.port = self.server.add_insecure_port(bind)
            else:
                self.port = self.server.add_secure_port(bind, tls.grpc_credentials())
        except RuntimeError as e:  # grpc reports a port in use this way
            raise OSError(f"cannot bind gRPC to {address}:{settings.grpc_port}: in use?") from e
        if self.port == 0:
            raise OSError(f"cannot bind gRPC to {address}:{settings.grpc_port}")

    async def start(self) -> None:
        await self.server.start()
        if self.engine.ready:
            await self.mark_serving()
        else:
            await self._set(health_pb2.HealthCheckResponse.NOT_SERVING)

    async def mark_serving(self) -> None:
        await self._set(health_pb2.HealthCheckResponse.SERVING)

    async def _set(self, status: int) -> None:
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    async def stop(self, grace: float) -> None:
        """Refuse new calls, let in-flight ones finish within `grace` seconds."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


def create_grpc_server(
    engine: EngineSurface,
    settings: Settings | None = None,
    *,
    metrics: Metrics | None = None,
    assembler: GroupAssembler | None = None,
    tenants: Tenants | None = None,
) -> GrpcServer:
    """Bind (not start) the gRPC server for `engine`; `await server.start()` to serve.
    Without `assembler` the group-assembly RPCs answer UNAVAILABLE. `tenants`: shared with the
    HTTP app so a reload applies to both (default: from `settings`)."""
    settings = settings or engine.settings
    return GrpcServer(engine, settings, metrics or Metrics(engine), assembler, tenants)
