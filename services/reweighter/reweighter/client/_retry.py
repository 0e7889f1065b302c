"""Retry policy shared by the clients: exponential backoff with full jitter.

Full jitter (a uniform delay in [0, base * 2^attempt]) spreads the retries of many trainer
processes that hit an overloaded or restarting service at the same moment.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..errors import ReweighterError


class ConnectionFailed(ReweighterError):
    """The service could not be reached (after retries): like 503 / UNAVAILABLE."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


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
