"""The HTTP client (aiohttp), async, and its sync wrapper; both return the engine's result types.

Answers are parsed with the same pydantic models the server emits (reweighter.wire.http), and
errors are raised as the server's reweighter.errors class, with its message and field. Retries
as in client/retry.py; a call that gets no answer in time is not retried (a service that is
merely slow would only get more load).

Why aiohttp: a group member waits on the server for its siblings, so a reward worker holds one
connection per member in flight (HTTP/1.1; uvicorn speaks no HTTP/2), and the pool must be
unbounded or a member could queue behind the siblings it waits for. httpx's pool scans every
connection on each request event: 15 ms of client CPU per member at 512 members in flight,
against under 1 ms here (BENCHMARKS.md, "Client CPU per member").
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
from pydantic import TypeAdapter, ValidationError

from ..errors import ConnectionFailed, ReweighterError
from ..tls import http_ssl_context
from ..types import (
    EmbedRequest,
    EmbedResult,
    EngineInfo,
    MemberResult,
    MemberSubmission,
)
from ..wire.calls import Call
from ..wire.http import ErrorOut, body, parse
from ._base import DEFAULT_TIMEOUT_S, DEFAULT_URL, AsyncClientBase
from ._sync import SyncClient
from .retry import RetryPolicy

T = TypeVar("T")
CONNECT_TIMEOUT_S = 5.0
_INFO = TypeAdapter(EngineInfo)
_JSON = {"content-type": "application/json"}


def _parse(cls: type[T]) -> Callable[[bytes], T]:
    """An answer parsed with the server's own response model, as the engine's type `cls`."""
    return lambda data: parse(cls, data)


def _error(status: int, headers: Any, data: bytes) -> ReweighterError:
    try:
        retry_after: float | None = float(headers["retry-after"])
    except (KeyError, ValueError):
        retry_after = None
    try:
        return ErrorOut.model_validate_json(data).to_error(retry_after)
    except ValidationError:
        text = f"HTTP {status}: {data[:500].decode(errors='replace')}"
        return ReweighterError(text, http_status=status, retry_after=retry_after)


class AsyncReweighterClient(AsyncClientBase):
    """Client for `reweighter serve` over HTTP (one unbounded keep-alive pool, many concurrent
    calls); the session is opened on first use, in the loop that uses it.

    async with AsyncReweighterClient("http://127.0.0.1:8080") as client:
        result = await client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.base_url = base_url.rstrip("/")
        # https: verified against ca_file, else SSL_CERT_FILE, else the system's roots (tls.py)
        self._ssl: ssl.SSLContext | bool = True
        if self.base_url.startswith("https://"):
            self._ssl = http_ssl_context(ca_file)
        elif ca_file is not None:
            raise ValueError(f"ca_file: {base_url} is plain HTTP; TLS is https://")
        self.timeout = timeout
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=0, ssl=self._ssl),  # see the docstring
                timeout=self._timeout(self.timeout),
                # answers are parsed as they are; no cookies, no proxies from the environment
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._http

    @staticmethod
    def _timeout(total: float | None) -> aiohttp.ClientTimeout:
        connect = CONNECT_TIMEOUT_S if total is None else min(total, CONNECT_TIMEOUT_S)
        return aiohttp.ClientTimeout(total=total, sock_connect=connect)

    async def _answer(self, call: Call, request: Any) -> Any:
        return await self._call("POST", call.path, _parse(call.result), body(request))

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        payload = body(EmbedRequest(list(texts)))
        return await self._call("POST", "/v1/embed", _parse(EmbedResult), payload)

    async def info(self) -> EngineInfo:
        return await self._call("GET", "/v1/info", _INFO.validate_json)

    async def _submit(self, sub: MemberSubmission, deadline: float | None) -> MemberResult:
        path = f"/v1/groups/{quote(sub.group_id, safe='')}/members"
        return await self._call("POST", path, _parse(MemberResult), body(sub), deadline)

    async def ready(self) -> bool:
        try:
            probe = self._timeout(min(self.timeout, CONNECT_TIMEOUT_S))  # a probe, not a call
            async with self._session().get(self.base_url + "/readyz", timeout=probe) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
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
        timeout: float | None | bool = False,
    ) -> T:
        """The answer of one call, with retries, parsed by `parse` (a response model's).
        `timeout`: seconds, None for no limit, False for the client's."""
        # NaN/inf written out (not refused here), so the server names the bad field.
        data = (
            None
            if payload is None
            else json.dumps(payload, allow_nan=True, separators=(",", ":")).encode()
        )
        limit = self.timeout if timeout is False else timeout
        kwargs: dict[str, Any] = {} if timeout is False else {"timeout": self._timeout(limit)}
        async for attempt in self.retry.attempts():
            with attempt:
                answer = await self._send(verb, path, data, limit, kwargs)
        return parse(answer)

    async def _send(
        self, verb: str, path: str, data: bytes | None, limit: float | None, kwargs: dict
    ) -> bytes:
        kwargs = dict(kwargs)
        if data is not None:
            kwargs["data"] = data
            kwargs["headers"] = _JSON
        try:
            async with self._session().request(verb, self.base_url + path, **kwargs) as response:
                answer = await response.read()
                status, headers = response.status, response.headers
        except aiohttp.ConnectionTimeoutError as e:  # before TimeoutError: it is both
            raise ConnectionFailed(f"{verb} {path}: no connection in {CONNECT_TIMEOUT_S} s") from e
        except TimeoutError as e:
            raise ReweighterError(
                f"{verb} {path}: no answer within {limit} s",
                http_status=504,
                grpc_code="DEADLINE_EXCEEDED",
            ) from e
        except aiohttp.ClientConnectionError as e:
            raise ConnectionFailed(f"{verb} {path}: {type(e).__name__}: {e}") from e
        if status >= 400:
            raise _error(status, headers, answer)
        return answer

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


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
