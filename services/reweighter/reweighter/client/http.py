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
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from ..api.http.schemas import (
    EmbedIn,
    EmbedOut,
    ErrorOut,
    InfoOut,
    MemberIn,
    MemberOut,
    ReweightIn,
    ReweightOut,
)
from ..assembly.types import MemberResult, MemberSubmission
from ..errors import ConnectionFailed, ReweighterError
from ..types import EmbedResult, EngineInfo, ReweightRequest, ReweightResult
from ._sync import SyncClient
from .retry import RetryPolicy

_CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)
M = TypeVar("M", bound=BaseModel)
_MEMBER_MARGIN_S = 30.0  # a member's answer may come this long after its timeout_s (Redis, load)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def _error(response: httpx.Response) -> ReweighterError:
    retry_after = _retry_after(response)
    try:
        return ErrorOut.model_validate_json(response.content).to_error(retry_after)
    except ValidationError:
        text = f"HTTP {response.status_code}: {response.text[:500]}"
        return ReweighterError(text, http_status=response.status_code, retry_after=retry_after)


class AsyncReweighterClient:
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
        body = ReweightIn.wire(request)
        return (await self._call("POST", "/v1/reweight", ReweightOut, body)).to_result()

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        body = EmbedIn.wire(texts)
        return (await self._call("POST", "/v1/embed", EmbedOut, body)).to_result()

    async def info(self) -> EngineInfo:
        return (await self._call("GET", "/v1/info", InfoOut)).to_info()

    async def submit_member(
        self,
        group_id: str,
        member_id: str,
        group_size: int,
        reward: float,
        *,
        completion: str | None = None,
        embedding: Sequence[float] | None = None,
        method: str = "dra",
        params: Mapping[str, Any] | None = None,
        advantages: str = "none",
        timeout_s: float | None = None,
    ) -> MemberResult:
        """Send one member of a group and wait for the group (docs/integrations.md). Retried
        like every call: it is idempotent. The read timeout is timeout_s plus a margin, or none
        when timeout_s is None (the server answers by its own maximum)."""
        sub = MemberSubmission(
            group_id, member_id, group_size, reward, completion, embedding, method,  # type: ignore[arg-type]
            dict(params or {}), advantages, timeout_s,  # type: ignore[arg-type]
        )  # fmt: skip
        path = f"/v1/groups/{quote(group_id, safe='')}/members"
        read = None if timeout_s is None else float(timeout_s) + _MEMBER_MARGIN_S
        timeout = httpx.Timeout(read, connect=5.0)
        answer = await self._call("POST", path, MemberOut, MemberIn.wire(sub), timeout=timeout)
        return answer.to_result()

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
        self, verb: str, path: str, model: type[M], payload: Any = None, timeout: Any = None
    ) -> M:
        async for attempt in self.retry.attempts():
            with attempt:
                response = await self._send(verb, path, payload, timeout)
        return model.model_validate_json(response.content)

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

    async def __aenter__(self) -> AsyncReweighterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ReweighterClient(SyncClient[AsyncReweighterClient]):
    """The synchronous HTTP client: AsyncReweighterClient on a private loop.

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
    ) -> None:
        super().__init__(
            lambda: AsyncReweighterClient(base_url, api_key=api_key, timeout=timeout, retry=retry)
        )
        self.retry = self.aio.retry

    def submit_member(
        self,
        group_id: str,
        member_id: str,
        group_size: int,
        reward: float,
        *,
        completion: str | None = None,
        embedding: Sequence[float] | None = None,
        method: str = "dra",
        params: Mapping[str, Any] | None = None,
        advantages: str = "none",
        timeout_s: float | None = None,
    ) -> MemberResult:
        """Send one member of a group and wait for the group (AsyncReweighterClient's)."""
        return self._run(
            self.aio.submit_member(
                group_id, member_id, group_size, reward, completion=completion,
                embedding=embedding, method=method, params=params, advantages=advantages,
                timeout_s=timeout_s,
            )
        )  # fmt: skip

    def ready(self) -> bool:
        return self._run(self.aio.ready())

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until /readyz answers 200 (the model is loaded)."""
        self._run(self.aio.wait_ready(timeout))
