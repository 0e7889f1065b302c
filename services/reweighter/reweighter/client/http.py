"""The HTTP client (httpx), async, and its sync wrapper; both return the engine's result types.

Answers are parsed with the same pydantic models the server emits (api/http/schemas.py), and
errors are raised as the server's reweighter.errors class, with its message and field. Retries
as in client/retry.py; read timeouts are not retried: a service that is merely slow would only
get more load.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter, ValidationError

from ..api.http import schemas
from ..assembly.types import MemberResult, MemberSubmission
from ..errors import ConnectionFailed, ReweighterError
from ..types import EmbedResult, EngineInfo, ReweightRequest, ReweightResult
from ._base import AsyncClientBase
from ._sync import SyncClient
from .retry import RetryPolicy

_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)
T = TypeVar("T")
# Answers are parsed with the server's own response models.
_REWEIGHT, _EMBED, _MEMBER = (
    m.model_validate_json for m in (schemas.ReweightOut, schemas.EmbedOut, schemas.MemberOut)
)
_INFO = TypeAdapter(EngineInfo)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def _error(response: httpx.Response) -> ReweighterError:
    retry_after = _retry_after(response)
    try:
        return schemas.ErrorOut.model_validate_json(response.content).to_error(retry_after)
    except ValidationError:
        text = f"HTTP {response.status_code}: {response.text[:500]}"
        return ReweighterError(text, http_status=response.status_code, retry_after=retry_after)


class AsyncReweighterClient(AsyncClientBase):
    """Client for `reweighter serve` over HTTP (one connection pool, many concurrent calls).

    async with AsyncReweighterClient("http://127.0.0.1:8080") as client:
        result = await client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

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
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = http or httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    async def reweight(self, request: ReweightRequest) -> ReweightResult:
        body = schemas.ReweightIn.wire(request)
        return (await self._call("POST", "/v1/reweight", _REWEIGHT, body)).to_result()

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        body = schemas.EmbedIn.wire(texts)
        return (await self._call("POST", "/v1/embed", _EMBED, body)).to_result()

    async def info(self) -> EngineInfo:
        return await self._call("GET", "/v1/info", _INFO.validate_json)

    async def _submit(self, sub: MemberSubmission, deadline: float | None) -> MemberResult:
        path = f"/v1/groups/{quote(sub.group_id, safe='')}/members"
        timeout = httpx.Timeout(deadline, connect=5.0)
        return (
            await self._call("POST", path, _MEMBER, schemas.MemberIn.wire(sub), timeout)
        ).to_result()

    async def ready(self) -> bool:
        try:
            return (await self._http.get("/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    async def wait_ready(self, timeout: float = 120.0) -> None:
        """Until /readyz answers 200 (the model is loaded)."""
        deadline = time.monotonic() + timeout
        while not await self.ready():
            if time.monotonic() > deadline:
                raise ConnectionFailed(f"the service was not ready after {timeout:.0f} s")
            await asyncio.sleep(0.2)

    async def _call(
        self,
        verb: str,
        path: str,
        parse: Callable[[bytes], T],
        payload: Any = None,
        timeout: httpx.Timeout | None = None,
    ) -> T:
        """The answer of one call, with retries, parsed by `parse` (a response model's)."""
        async for attempt in self.retry.attempts():
            with attempt:
                response = await self._send(verb, path, payload, timeout)
        return parse(response.content)

    async def _send(
        self, verb: str, path: str, payload: Any, timeout: Any = None
    ) -> httpx.Response:
        kwargs: dict[str, Any] = {"timeout": timeout or httpx.USE_CLIENT_DEFAULT}
        if payload is not None:
            # NaN/inf written out (not refused here), so the server names the bad field.
            content = json.dumps(payload, allow_nan=True, separators=(",", ":")).encode()
            kwargs["content"] = content
            kwargs["headers"] = {"content-type": "application/json"}
        try:
            response = await self._http.request(verb, path, **kwargs)
        except _CONNECT_ERRORS as e:
            raise ConnectionFailed(f"{verb} {path}: {e}") from e
        if not response.is_success:
            raise _error(response)
        return response

    async def close(self) -> None:
        await self._http.aclose()


class ReweighterClient(SyncClient[AsyncReweighterClient]):
    """The synchronous HTTP client: AsyncReweighterClient on a private loop.

    with ReweighterClient("http://127.0.0.1:8080") as client:
        result = client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

    async_class = AsyncReweighterClient  # takes its arguments

    def ready(self) -> bool:
        return self._run(self.aio.ready())

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until /readyz answers 200 (the model is loaded)."""
        self._run(self.aio.wait_ready(timeout))
