"""Base rewards from another OpenRLHF-protocol reward server (its "rewards" list).

One long-lived connection pool per upstream: the route calls it once per OpenRLHF request,
and a client per call would pay a TCP (and TLS) handshake on every sample.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..errors import ReweighterError
from ..logs import redact_url


class UpstreamVerifier:
    """A `Verifier` over `url`; `aclose()` when the service stops."""

    def __init__(self, url: str, *, timeout_s: float = 120.0) -> None:
        self.url = url
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def __call__(
        self, queries: list[str], prompts: list[str], labels: list[Any]
    ) -> list[float]:
        where = redact_url(self.url)
        try:
            response = await self._http.post(
                self.url, json={"query": queries, "prompts": prompts, "labels": labels}
            )
            response.raise_for_status()
            rewards = response.json()["rewards"]
            if len(rewards) != len(queries):
                raise ValueError(f"{len(rewards)} rewards for {len(queries)} queries")
            return [float(r[0] if isinstance(r, list) else r) for r in rewards]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            # 502: the upstream failed, not this request; OpenRLHF retries it. The exception's
            # own text may carry the raw URL, so only its kind (or status) is repeated.
            why = (
                f"HTTP {e.response.status_code}"
                if isinstance(e, httpx.HTTPStatusError)
                else type(e).__name__
            )
            raise ReweighterError(
                f"upstream reward server {where} failed: {why}",
                http_status=502,
                grpc_code="UNAVAILABLE",
            ) from e

    async def aclose(self) -> None:
        await self._http.aclose()
