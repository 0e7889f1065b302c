"""The Ray Serve client (`ray://<app>`): the reweighter deployed on this Ray cluster
(reweighter.deploy.ray), called through a DeploymentHandle, with the clients' request and
result types and their retries.

For callers inside the cluster (a verl reward worker, an OpenRLHF or SkyRL actor): no HTTP,
no proxy; the request objects travel as Ray objects to a replica. The process must be in the
cluster already (a Ray task or actor), or `ray.init(address=...)` is called for it with
`address` (default "auto"). Errors come back as the service's own classes (422 InvalidInput,
401 Unauthenticated, ...); a replica that dies under a call (or none to route to) is a
ConnectionFailed, retried like a connection lost over HTTP, so a member reaches another
replica and, through Redis, its group. Needs `ray[serve]` in the caller's environment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..errors import ConnectionFailed, NotReady, Overloaded, ReweighterError
from ..types import EmbedResult, EngineInfo, MemberResult, MemberSubmission
from ..wire.calls import Call
from ._base import DEFAULT_TIMEOUT_S, AsyncClientBase
from ._sync import SyncClient
from .retry import RetryPolicy

DEFAULT_APP = "reweighter"
DEPLOYMENT = "Reweighter"


def app_name(url: str) -> str:
    """The Serve application a `ray://<app>` URL names."""
    name = url.split("://", 1)[1].strip("/")
    if not name:
        return DEFAULT_APP
    if ":" in name or "/" in name:
        raise ValueError(
            f"reweighter url {url!r}: ray://<app> names a Serve application (e.g. "
            "ray://reweighter); a Ray Client address such as ray://host:10001 goes to "
            "ray.init(address=...) first"
        )
    return name


class AsyncRayReweighterClient(AsyncClientBase):
    """The async client over a DeploymentHandle of the application `app`."""

    def __init__(
        self,
        app: str = DEFAULT_APP,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        address: str = "auto",
    ) -> None:
        self.retry = retry or RetryPolicy()
        self.app, self.timeout, self.address = app, timeout, address
        self._key = api_key
        self._handle: Any = None

    def _get_handle(self) -> Any:
        if self._handle is None:
            import ray
            from ray import serve

            if not ray.is_initialized():
                ray.init(address=self.address, log_to_driver=False)
            self._handle = serve.get_deployment_handle(DEPLOYMENT, app_name=self.app)
        return self._handle

    async def _answer(self, call: Call, request: Any) -> Any:
        return await self._call("call", self.timeout, call.name, request)

    async def embed(self, texts: Sequence[str]) -> EmbedResult:
        return await self._call("embed", self.timeout, list(texts))  # type: ignore[no-any-return]

    async def info(self) -> EngineInfo:
        return await self._call("info", self.timeout)  # type: ignore[no-any-return]

    async def _submit(self, sub: MemberSubmission, deadline: float | None) -> MemberResult:
        return await self._call("submit_member", deadline, sub)  # type: ignore[no-any-return]

    async def _call(self, method: str, timeout: float | None, *args: Any) -> Any:
        async for attempt in self.retry.attempts():
            with attempt:
                result = await self._once(method, timeout, *args)
        return result

    async def _once(self, method: str, timeout: float | None, *args: Any) -> Any:
        from ray import exceptions as rex
        from ray.serve import exceptions as sex

        handle = await asyncio.to_thread(self._get_handle)  # ray.init may block
        try:
            response = getattr(handle, method).remote(*args, api_key=self._key)
            return await asyncio.wait_for(_awaited(response), timeout)
        except TimeoutError as e:
            raise ReweighterError(
                f"{method}: no answer within {timeout} s",
                http_status=504,
                grpc_code="DEADLINE_EXCEEDED",
            ) from e
        except rex.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, ReweighterError):
                raise cause from None
            if isinstance(cause, (rex.RayActorError, rex.ActorUnavailableError)):
                raise ConnectionFailed(f"{method}: the replica died: {cause}") from e
            raise ReweighterError(f"{method}: {type(cause or e).__name__}: {cause or e}") from e
        except sex.BackPressureError as e:
            raise Overloaded(f"{method}: {e}", retry_after=1.0) from e
        except sex.DeploymentUnavailableError as e:
            raise NotReady(f"{method}: {e}", retry_after=1.0) from e
        except (rex.RayActorError, rex.ActorUnavailableError) as e:
            raise ConnectionFailed(f"{method}: the replica died: {e}") from e

    async def close(self) -> None:
        self._handle = None


async def _awaited(response: Any) -> Any:
    return await response


class RayReweighterClient(SyncClient[AsyncRayReweighterClient]):
    """The synchronous Ray Serve client: AsyncRayReweighterClient on a private loop.

    client = connect("ray://reweighter")     # inside the cluster, or after ray.init(...)
    result = client.reweight(ReweightRequest(groups=[Group(rewards, completions)]))
    """

    async_class = AsyncRayReweighterClient  # takes its arguments
