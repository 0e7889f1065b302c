"""The reweighter as a Ray Serve application: `serve run reweighter.deploy.ray:build` (or the
config in deploy/ray/serve.yaml with `serve run` / `serve deploy`).

Each replica is what `reweighter serve` runs, built by the same factory (service.Core): one
engine with its batcher, the tenants, the drain, the metrics, the group assembler and the
HTTP app, from the same Settings (the `settings` argument, over the REWEIGHTER_* environment of
the replica's runtime_env). Redis (`redis_url`) is the store the replicas share: group
assembly, the answer memory and the embedding cache, exactly as between `reweighter serve`
processes.

Two ways in:

- HTTP through Serve's proxy: the /v1 API, the same app (`@serve.ingress`), so the same bodies,
  errors, keys and tenants (admission.py is ASGI middleware and runs here unchanged). What does
  not apply: the connection layer (api/http/connections.py) hooks uvicorn's protocol inside
  `reweighter serve`; Serve's proxy owns the connections, so its header/body deadlines, the
  `max_connections` bound, the probes answered before the app and the `gone` probe of a
  request whose client left are absent (the proxy cancels a request whose client disconnects
  instead). gRPC is not served (Serve's gRPC proxy wants its own protobuf servicers).
- A DeploymentHandle, for callers inside the cluster: `reweighter.client.connect("ray://
  reweighter")` (client/ray.py) calls `call`, `submit_member`, `embed`, `info` below with the
  client's request and result types; the API key, when the service wants one, travels with
  each call and picks the tenant as the bearer header does.

Bad settings are refused when the application is built (`serve run`, `serve deploy`, or a
replica starting), naming the setting: more than one replica without `redis_url`, GPUs asked
on a cluster that has none, a model that is not there, TLS files (the proxy's to serve)
(DeployRefused).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ray import serve

from ..config import Settings
from ..errors import ReweighterError
from ..service import ENGINE_STOP_S, Core, freeze_heap
from ..tenancy import Deadline, Tenant, enter, set_deadline
from ..types import EmbedResult, EngineInfo, MemberResult, MemberSubmission
from ..wire.calls import get_call
from .checks import DeployRefused, check

log = logging.getLogger("reweighter.deploy.ray")

APP_NAME = "reweighter"
"""The application's name by default: `connect("ray://reweighter")`."""
DEPLOYMENT_NAME = "Reweighter"

MAX_ONGOING = 4096
"""Requests one replica takes at once. A group member waits in its replica for its siblings,
so Serve's default (5) would let eight members of one group hold five slots and queue the
other three behind them forever: the bound must sit above the members in flight per replica
(the assembly bounds, not Serve's, are what limit the work)."""

DEFAULTS: dict[str, Any] = {
    "max_ongoing_requests": MAX_ONGOING,
    "ray_actor_options": {"num_cpus": 1},
    # a scale-down waits this long for requests in flight: members waiting for their group
    # included (assembly_timeout_s 300 s by default, plus the answer's margin)
    "graceful_shutdown_timeout_s": 330.0,
    "health_check_period_s": 10.0,
    "health_check_timeout_s": 30.0,
}
"""The deployment options the application starts from; `args.deployment` overrides them."""


def _cluster_gpus() -> float | None:
    import ray

    if not ray.is_initialized():
        return None
    return float(ray.cluster_resources().get("GPU", 0.0))


_replica_app: Any = None
"""The HTTP app of the replica in this process (a Serve replica is one actor, one process):
Reweighter.__init__ builds it, `_app` hands it to Serve's ingress wrapper."""


def _app() -> Any:
    assert _replica_app is not None, "the Reweighter constructor builds the app"
    return _replica_app


@serve.ingress(_app)
class Reweighter:
    """One replica: `reweighter serve`'s engine, assembler and HTTP app (service.Core) behind
    Serve. The engine loads (and the assembler connects) in the app's lifespan, before Serve
    routes anything here, so a replica is ready when it is RUNNING."""

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        global _replica_app
        from ..engine import ReweightEngine

        self.settings = Settings(**dict(settings or {}))
        context = serve.get_replica_context()
        config = getattr(context, "_deployment_config", None)
        if config is not None:  # the options Serve runs with, whatever set them
            options = {
                "num_replicas": config.num_replicas,
                "autoscaling_config": config.autoscaling_config,
            }
            check(self.settings, options, None)
        else:
            check(self.settings, {}, None)
        self.engine = ReweightEngine(self.settings)
        self.core = Core(self.settings, self.engine)
        app = self.core.app
        app_lifespan = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[None]:
            await asyncio.to_thread(self.engine.load)
            freeze_heap()
            await self.core.assembler.start()
            async with app_lifespan(app):
                yield
            # Serve drained the replica first: its requests in flight finished. Ray 2.57's
            # controller force-kills a replica still draining at graceful_shutdown_timeout_s,
            # before this runs, so a member still waiting then gets ConnectionFailed through a
            # handle (retried: another replica answers its group through Redis) or Serve's 500
            # through the proxy; the shipped 330 s outlasts a member's 300 s wait (deploy.md)
            await self.core.assembler.aclose()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.engine.aclose(), timeout=ENGINE_STOP_S)

        app.router.lifespan_context = lifespan
        _replica_app = app

    async def check_health(self) -> None:
        if not self.core.drained.ready:
            raise RuntimeError("the engine is not loaded")

    # -- the handle's surface (client/ray.py): the client's request and result types --------

    def _caller(self, api_key: str | None) -> Tenant:
        header = f"Bearer {api_key}" if api_key else None
        tenant = self.core.tenants.table.resolve_bearer(header)
        enter(tenant)  # this call's task only
        set_deadline(Deadline(None, None))
        return tenant

    async def call(self, name: str, request: Any, api_key: str | None = None) -> Any:
        """One call of reweighter.wire.calls by name ("reweight", ...)."""
        self._caller(api_key)
        return await getattr(self.core.drained, get_call(name).engine)(request)

    async def submit_member(
        self, sub: MemberSubmission, api_key: str | None = None
    ) -> MemberResult:
        self._caller(api_key)
        return await self.core.assembler.submit(sub)

    async def embed(self, texts: list[str], api_key: str | None = None) -> EmbedResult:
        self._caller(api_key)
        return await self.core.drained.aembed(texts)

    async def info(self, api_key: str | None = None) -> EngineInfo:
        self._caller(api_key)
        return self.core.drained.info()


def build(args: Mapping[str, Any] | None = None) -> serve.Application:
    """The application, from `args` (a Serve config's `args:`, or `serve run ... key=value`):
    `settings` (Settings fields; the replicas' REWEIGHTER_* environment fills the rest) and
    `deployment` (Serve deployment options over DEFAULTS: num_replicas or autoscaling_config,
    ray_actor_options, max_ongoing_requests, graceful_shutdown_timeout_s, ...). Checked here
    (check()), against the cluster when there is one: put replicas and GPUs in `args`, not in a
    config's `deployments:` override, so the check sees them (a replica still refuses
    several replicas without Redis, whatever set them)."""
    args = dict(args or {})
    unknown = set(args) - {"settings", "deployment"}
    if unknown:
        raise DeployRefused(f"{sorted(unknown)[0]}: unknown argument (settings, deployment)")
    settings = dict(args.get("settings") or {})
    options = {**DEFAULTS, **dict(args.get("deployment") or {})}
    options["ray_actor_options"] = {
        **DEFAULTS["ray_actor_options"],
        **dict((args.get("deployment") or {}).get("ray_actor_options") or {}),
    }
    env = dict(options["ray_actor_options"].get("runtime_env", {}).get("env_vars", {}))
    # the settings as a replica will read them: this process's environment stands in for the
    # replica's, plus what the runtime_env sets
    with _environ({**env, "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1")}):
        try:
            resolved = Settings(**settings)
        except ReweighterError:
            raise
        except Exception as e:  # pydantic names the field
            raise DeployRefused(f"settings: {e}") from e
        check(resolved, options, _cluster_gpus())
    return (
        serve.deployment(Reweighter, name=DEPLOYMENT_NAME)
        .options(**options)
        .bind(settings=settings)
    )


@contextlib.contextmanager
def _environ(extra: Mapping[str, str]) -> Any:
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update({k: str(v) for k, v in extra.items()})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def __getattr__(name: str) -> Any:
    if name == "app":  # `serve run reweighter.deploy.ray:app`: the defaults, built when asked
        return build({})
    raise AttributeError(name)


__all__ = ["APP_NAME", "DEFAULTS", "DeployRefused", "Reweighter", "build", "check"]
