"""Retries for both clients, by tenacity: exponential backoff with full jitter, honouring the
server's Retry-After, on the errors a retry can cure.

Retryable: Overloaded (429 / RESOURCE_EXHAUSTED with the Overloaded type), the model still
loading or a restarting server (503 / UNAVAILABLE), and ConnectionFailed. A request over the
size limits or an invalid one fails at once. Reweighting is a pure function of its input, so a
retried request cannot be applied twice. Full jitter (a uniform delay in
[0, backoff * 2^attempt]) spreads the retries of many trainer processes that hit an overloaded
or restarting service at the same moment.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ..errors import ReweighterError

_RETRY_HTTP = frozenset({429, 503})


def retryable(exc: BaseException) -> bool:
    return isinstance(exc, ReweighterError) and (
        exc.http_status in _RETRY_HTTP or exc.grpc_code == "UNAVAILABLE"
    )


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 4
    """Extra attempts after the first one."""
    backoff: float = 0.1
    """Base delay in seconds; attempt k waits up to backoff * 2**k."""
    max_backoff: float = 5.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        cap = min(self.max_backoff, self.backoff * 2**attempt)
        wait = random.uniform(0, cap)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_backoff))
        return wait

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self.delay(state.attempt_number - 1, getattr(exc, "retry_after", None))

    def attempts(self) -> AsyncRetrying:
        """`async for attempt in policy.attempts(): with attempt: ...` (reraises the last)."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=self._wait,
            retry=retry_if_exception(retryable),
            reraise=True,
        )
