"""HTTP clients (sync and async, httpx) returning the engine's result types.

Retries (backoff with jitter) on 429, 503 and connection failures; reweighting is a pure
function of its input, so a retried request cannot be applied twice. Read timeouts are not
retried: a service that is merely slow would only get more load. Errors are raised as the
server's reweighter.errors class, with its message and field.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import httpx

from ..api import convert
from ..errors import ReweighterError
from ..types import EmbedResult, ReweightRequest, ReweightResult
from ._retry import ConnectionFailed, RetryPolicy

_RETRY_STATUS = frozenset({429, 503})
_RETRY_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def _timeout(timeout: float) -> httpx.Timeout:
    return httpx.Timeout(timeout, connect=min(timeout, 5.0))


def _body(payload: Any) -> dict[str, Any]:
    """JSON with NaN/inf written out (not refused here), so the server names the bad field."""
    if payload is None:
        return {}
    content = json.dumps(payload, allow_nan=True, separators=(",", ":")).encode()
    return {"content": content, "headers": {"content-type": "application/json"}}


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        body = response.json()["error"]
        error = convert.error_from(body.get("type"), str(body["message"]), body.get("field"))
    except (ValueError, KeyError, TypeError):
        error = None
    if error is not None:
        raise error
    err = ReweighterError(f"HTTP {response.status_code}: {response.text[:500]}")
    err.http_status = response.status_code
    raise err


class ReweighterClient:
    """Synchronous client for `reweighter serve` over HTTP.

    with ReweighterClient("http://127.0.0.1:8080") as client:
        result = client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = http or httpx.Client(
            base_url=base_url, headers=_headers(api_key), timeout=_timeout(timeout)
        )

    def reweight(self, request: ReweightRequest) -> ReweightResult:
        body = self._call("POST", "/v1/reweight", convert.request_to_http(request))
        return convert.http_to_result(body)

    def embed(self, texts: Sequence[str]) -> EmbedResult:
        return convert.http_to_embed(self._call("POST", "/v1/embed", {"inputs": list(texts)}))

    def info(self) -> dict[str, Any]:
        return self._call("GET", "/v1/info")

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until /readyz answers 200 (the model is loaded)."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise ConnectionFailed(f"the service was not ready after {timeout:.0f} s")
            time.sleep(0.2)

    def _call(self, verb: str, path: str, json: Any = None) -> Any:
        for attempt in range(self.retry.retries + 1):
            last = attempt == self.retry.retries
            try:
                response = self._http.request(verb, path, **_body(json))
            except _RETRY_ERRORS as e:
                if last:
                    raise ConnectionFailed(f"{verb} {path}: {e}") from e
                time.sleep(self.retry.delay(attempt))
                continue
            if response.status_code in _RETRY_STATUS and not last:
                time.sleep(self.retry.delay(attempt, _retry_after(response)))
                continue
            _raise_for(response)
            return response.json()
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ReweighterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncReweighterClient:
    """The asyncio twin of ReweighterClient (one connection pool, many concurrent calls)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = http or httpx.AsyncClient(
            base_url=base_url,
            headers=_headers(api_key),
            timeout=_timeout(timeout),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def reweight(self, request: ReweightRequest) -> ReweightResult:
        body = await self._call("POST", "/v1/reweight", convert.request_to_http(request))
        return convert.http_to_result(body)

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        body = await self._call("POST", "/v1/embed", {"inputs": list(texts)})
        return convert.http_to_embed(body)

    async def info(self) -> dict[str, Any]:
        return await self._call("GET", "/v1/info")

    async def ready(self) -> bool:
        try:
            return (await self._http.get("/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    async def _call(self, verb: str, path: str, json: Any = None) -> Any:
        for attempt in range(self.retry.retries + 1):
            last = attempt == self.retry.retries
            try:
                response = await self._http.request(verb, path, **_body(json))
            except _RETRY_ERRORS as e:
                if last:
                    raise ConnectionFailed(f"{verb} {path}: {e}") from e
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if response.status_code in _RETRY_STATUS and not last:
                await asyncio.sleep(self.retry.delay(attempt, _retry_after(response)))
                continue
            _raise_for(response)
            return response.json()
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncReweighterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
