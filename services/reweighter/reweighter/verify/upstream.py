"""Base rewards from another OpenRLHF-protocol reward server (its "rewards" list), and the
quality part of each when the server reports one (`extra_logs.quality`, one number per query):
the route then reweights only that part (issue 49; docs/integrations.md, OpenRLHF).

One long-lived connection pool per upstream: the route calls it once per OpenRLHF request,
and a client per call would pay a TCP (and TLS) handshake on every sample.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..errors import ReweighterError
from ..logs import redact_url


class Rewards(list[float]):
    """One base reward per query, and `quality`: the quality part of each (None: the whole
    reward is quality)."""

    quality: list[float] | None = None


def _number(r: Any) -> float:
    return float(r[0] if isinstance(r, list) else r)


class UpstreamVerifier:
    """A `Verifier` over `url`; `aclose()` when the service stops."""

    def __init__(self, url: str, *, timeout_s: float = 120.0) -> None:
        self.url = url
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> Rewards:
        where = redact_url(self.url)
        try:
            response = await self._http.post(
                self.url, json={"query": queries, "prompts": prompts, "labels": labels}
            )
            response.raise_for_status()
            body = response.json()
            rewards = body["rewards"]
            if len(rewards) != len(queries):
                raise ValueError(f"{len(rewards)} rewards for {len(queries)} queries")
            out = Rewards(_number(r) for r in rewards)
            quality = (body.get("extra_logs") or {}).get("quality")
            if quality is not None:
                if len(quality) != len(queries):
                    raise ValueError(f"{len(quality)} quality values for {len(queries)} queries")
                out.quality = [_number(q) for q in quality]
            return out
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
