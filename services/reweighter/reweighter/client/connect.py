"""One way to connect: a URL in, a client out, for every integration and the trainer.

    client = connect("http://reweighter:8080")      # or https://, grpc://, grpcs://, inprocess://
    client = connect("grpcs://host:50051", ca_file="ca.pem")   # TLS, this CA's roots trusted
    client = connect("ray://reweighter")             # the Ray Serve app, by a DeploymentHandle
    client.reweight(request)                         # a whole batch (TRL, slime, SkyRL)
    await client.submit_member_async(...)            # one member, from any event loop (verl)

Every client `connect` returns implements `Reweighter` (client/_base.py, with the one set of
defaults: URL, ports, timeout), the one surface an integration calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._base import DEFAULT_TIMEOUT_S, DEFAULT_URL, Reweighter
from .retry import RetryPolicy

if TYPE_CHECKING:
    from ..config import Settings

SCHEMES = ("http://", "https://", "grpc://", "grpcs://", "ray://", "inprocess://")
INPROCESS = "inprocess"
"""The bare word, as TRL's `reweighted(backend="inprocess")` and the trainer config spell it."""


def connect(
    url: str = DEFAULT_URL,
    *,
    api_key: str | None = None,
    timeout_s: float | None = None,
    retry: RetryPolicy | None = None,
    settings: Settings | Mapping[str, Any] | None = None,
    ca_file: str | None = None,
) -> Reweighter:
    """A client for `url`: "http(s)://host:port[/prefix]", "grpc://host:port", "grpcs://host:port"
    (https and grpcs: TLS, the server verified against `ca_file`, a PEM file of the roots to
    trust, else SSL_CERT_FILE's, else the system's; reweighter/tls.py), "ray://<app>" (the
    Ray Serve application of that name on the Ray cluster this process is in, through a
    DeploymentHandle: client/ray.py) or
    "inprocess://" (also "inprocess": the engine in this process, built on first use from
    `settings`, a Settings or overrides of the environment's, e.g. {"long_text": "tail"};
    needs `reweighter[server]`).

    `timeout_s` bounds each reweight/embed/info call over the network (default
    DEFAULT_TIMEOUT_S); members wait by their own `timeout_s`. An option the backend cannot
    apply is refused (ValueError naming it), never dropped: `settings` (e.g. long_text) set up
    the in-process engine, while a server is set up by its own flags; in process there is no
    network to authenticate or to wait for, so `api_key` and `timeout_s` are refused there.
    The HTTP client also has `ready`/`wait_ready`."""
    inprocess = url in (INPROCESS, "inprocess://")
    if settings and not inprocess and url.startswith(SCHEMES):
        raise ValueError(
            f"settings {sorted(dict(settings)) if isinstance(settings, Mapping) else settings}: "
            f"they configure the in-process engine; {url} is a server, set up by its own flags "
            "(e.g. `reweighter serve --long-text tail`)"
        )
    for name, value in (("api_key", api_key), ("timeout_s", timeout_s)):
        if inprocess and value is not None:
            raise ValueError(f"{name}: the in-process backend has no network; leave it unset")
    if ca_file is not None and not url.startswith(("https://", "grpcs://")):
        raise ValueError(f"ca_file: {url} is not TLS; give https:// or grpcs://")
    timeout = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
    if url.startswith(("http://", "https://")):
        from .http import ReweighterClient

        return ReweighterClient(url, api_key=api_key, timeout=timeout, retry=retry, ca_file=ca_file)
    if url.startswith(("grpc://", "grpcs://")):
        from .grpc import GrpcReweighterClient

        target = url.split("://", 1)[1].rstrip("/")
        credentials = None
        if url.startswith("grpcs://"):
            from ..tls import grpc_channel_credentials

            credentials = grpc_channel_credentials(ca_file)
        return GrpcReweighterClient(
            target, api_key=api_key, timeout=timeout, retry=retry, credentials=credentials
        )
    if url.startswith("ray://"):
        from .ray import RayReweighterClient, app_name

        return RayReweighterClient(app_name(url), api_key=api_key, timeout=timeout, retry=retry)
    if inprocess:
        from .local import LocalClient

        return LocalClient(settings=settings, retry=retry)
    raise ValueError(
        f"reweighter url {url!r}: expected http://host:port, https://host:port, "
        "grpc://host:port, grpcs://host:port, ray://<app> or inprocess://"
    )
