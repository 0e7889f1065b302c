"""Python clients for `reweighter serve`: HTTP (sync, async) and gRPC (sync, async).

All four share one surface: `reweight(ReweightRequest) -> ReweightResult`,
`embed(texts) -> EmbedResult`, `info() -> dict`, `close()`, and context managers.
"""

from ._retry import ConnectionFailed, RetryPolicy
from .grpc import AsyncGrpcReweighterClient, GrpcReweighterClient
from .http import AsyncReweighterClient, ReweighterClient

__all__ = [
    "AsyncGrpcReweighterClient",
    "AsyncReweighterClient",
    "ConnectionFailed",
    "GrpcReweighterClient",
    "ReweighterClient",
    "RetryPolicy",
]
