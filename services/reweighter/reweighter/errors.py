"""Errors every transport maps the same way: one rule, one status code per transport."""

from __future__ import annotations


class ReweighterError(Exception):
    """Base class; `field` names the offending input (dotted path) when there is one."""

    http_status = 500
    grpc_code = "INTERNAL"

    def __init__(self, message: str, field: str | None = None) -> None:
        self.message = message
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class InvalidInput(ReweighterError, ValueError):
    """Bad input: HTTP 422, gRPC INVALID_ARGUMENT."""

    http_status = 422
    grpc_code = "INVALID_ARGUMENT"


class LimitExceeded(ReweighterError):
    """A request over the configured size limits: HTTP 413, gRPC RESOURCE_EXHAUSTED."""

    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class Overloaded(ReweighterError):
    """Too many requests queued: HTTP 429, gRPC RESOURCE_EXHAUSTED. Clients retry with backoff."""

    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"


class NotReady(ReweighterError):
    """The model is still loading: HTTP 503, gRPC UNAVAILABLE. Clients retry."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


class Unauthenticated(ReweighterError):
    """Missing or wrong API key: HTTP 401, gRPC UNAUTHENTICATED."""

    http_status = 401
    grpc_code = "UNAUTHENTICATED"


# -- group assembly (issue 12) ---------------------------------------------------------------


class Conflict(ReweighterError):
    """The same group member sent again with a different payload: 409, gRPC ALREADY_EXISTS."""

    http_status = 409
    grpc_code = "ALREADY_EXISTS"


class PreconditionFailed(ReweighterError):
    """A member that does not fit its group (size, method, ...): 409, FAILED_PRECONDITION."""

    http_status = 409
    grpc_code = "FAILED_PRECONDITION"


class StoreUnavailable(ReweighterError):
    """The shared assembly store (Redis) cannot be reached: HTTP 503, gRPC UNAVAILABLE."""

    http_status = 503
    grpc_code = "UNAVAILABLE"
