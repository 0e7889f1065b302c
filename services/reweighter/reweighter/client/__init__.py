"""Python clients for `reweighter serve`: one async client per transport (HTTP: httpx, gRPC:
grpc.aio) and a thin sync wrapper of each.

All four share one surface: `reweight(ReweightRequest) -> ReweightResult`,
`embed(texts) -> EmbedResult`, `info() -> EngineInfo`, `close()`, and context managers.
"""

from ..errors import ConnectionFailed
from .grpc import AsyncGrpcReweighterClient, GrpcReweighterClient
from .http import AsyncReweighterClient, ReweighterClient
from .retry import RetryPolicy

__all__ = [
    "AsyncGrpcReweighterClient",
    "AsyncReweighterClient",
    "ConnectionFailed",
    "GrpcReweighterClient",
    "ReweighterClient",
    "RetryPolicy",
]
