"""Python clients for `reweighter serve`, and the one way to get one: `connect(url)`.

One async client per transport (HTTP: aiohttp, gRPC: grpc.aio, in-process: the engine) and a
thin sync wrapper of each. All share one surface: `reweight(ReweightRequest) -> ReweightResult`,
`embed(texts) -> EmbedResult`, `info() -> EngineInfo`, `submit_member(...) -> MemberResult`,
`close()`, and context managers; the sync ones add `submit_member_async` (any event loop) and
implement `Reweighter`, the protocol the integrations call.

This package imports without torch, sentence-transformers, fastapi or uvicorn (the light
install, `pip install reweighter`); only the in-process client needs `reweighter[server]`.
"""

from ..errors import ConnectionFailed
from ._base import DEFAULT_GRPC_TARGET, DEFAULT_TIMEOUT_S, DEFAULT_URL
from .connect import Reweighter, connect
from .grpc import AsyncGrpcReweighterClient, GrpcReweighterClient
from .http import AsyncReweighterClient, ReweighterClient
from .local import AsyncLocalClient, LocalClient
from .retry import RetryPolicy

__all__ = [
    "DEFAULT_GRPC_TARGET",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_URL",
    "AsyncGrpcReweighterClient",
    "AsyncLocalClient",
    "AsyncReweighterClient",
    "ConnectionFailed",
    "GrpcReweighterClient",
    "LocalClient",
    "Reweighter",
    "ReweighterClient",
    "RetryPolicy",
    "connect",
]
