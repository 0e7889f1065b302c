"""Errors every transport maps the same way: one rule, one status code per transport."""

from __future__ import annotations

from typing import Any


class ReweighterError(Exception):
    """Base class; `field` names the offending input (dotted path) when there is one.

    Instances are immutable once built: a client rebuilds the server's error with the same
    class, message and field, and nothing downstream may rewrite them. `http_status` /
    `grpc_code` default to the class's; a client that meets a status it does not know passes
    them in. `retry_after` is the server's hint (seconds) for retryable errors.
    """

    http_status = 500
    grpc_code = "INTERNAL"

    def __init__(
        self,
        message: str,
        field: str | None = None,
        *,
        http_status: int | None = None,
        grpc_code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "message", message)
        set_(self, "field", field)
        set_(self, "retry_after", retry_after)
        if http_status is not None:
            set_(self, "http_status", http_status)
        if grpc_code is not None:
            set_(self, "grpc_code", grpc_code)
        super().__init__(f"{field}: {message}" if field else message)
        set_(self, "_frozen", True)

    def __setattr__(self, name: str, value: object) -> None:
        # Python itself sets __traceback__ / __cause__ / __context__ / __notes__ on raise.
        if name.startswith("__") or not getattr(self, "_frozen", False):
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"{type(self).__name__} is immutable; build a new error instead")

    def __reduce__(self) -> tuple[Any, ...]:
        kwargs = {"http_status": self.http_status, "grpc_code": self.grpc_code}
        kwargs["retry_after"] = self.retry_after
        return (_rebuild, (type(self), self.message, self.field, kwargs))


def _rebuild(cls: type[ReweighterError], message: str, field: str | None, kw: Any) -> Any:
    return cls(message, field, **kw)


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


# -- client side -----------------------------------------------------------------------------


class ConnectionFailed(ReweighterError):
    """The service could not be reached (after retries): like 503 / UNAVAILABLE."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


def error_from(
    type_name: str | None, message: str, field: str | None, *, retry_after: float | None = None
) -> ReweighterError:
    """The server's error rebuilt as the same class (by name), message and field."""
    cls = globals().get(type_name or "")
    if not (isinstance(cls, type) and issubclass(cls, ReweighterError)):
        cls = ReweighterError
    return cls(message, field=field, retry_after=retry_after)
