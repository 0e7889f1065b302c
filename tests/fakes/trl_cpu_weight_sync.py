"""Lets TRL's vLLM *server mode* client run on a CPU-only machine without vLLM installed.

Everything that speaks HTTP stays TRL's own code (VLLMClient.generate, get_server_info,
get_world_size, update_named_params' POSTs, reset_prefix_cache). Only what cannot exist here is
replaced, and nothing else:

- `is_vllm_available()` answers True in trl.generation (TRL refuses server mode without vLLM,
  although the client side only needs HTTP).
- `VLLMClient.init_communicator`: same HTTP calls as TRL's (server_info check, world size, POST
  /init_weight_transfer_engine), but no CUDA device check and no NCCL rendezvous.
- the NCCL broadcast of the weight tensors (`packed_nccl_broadcast_producer`): consumed on CPU
  and recorded in `BROADCASTS`, so a test can check the trainer streamed every parameter.
"""

from __future__ import annotations

from typing import Any

import pytest

BROADCASTS: list[list[tuple[str, tuple[int, ...]]]] = []


class CpuCommunicator:
    """Stands where vLLM's NCCL trainer endpoint would be."""

    def __init__(self, init_info: dict[str, Any]) -> None:
        self.init_info = init_info


def _producer(iterator, group, src=0, post_iter_func=None, **_: Any) -> None:
    assert isinstance(group, CpuCommunicator), "weight sync before init_communicator"
    BROADCASTS.append([(name, tuple(t.shape)) for name, t in iterator])


def _init_communicator(self, device: Any = 0) -> None:
    if self.get_server_info()["weight_transfer_config"] is None:
        raise RuntimeError("the server has no weight-transfer engine")
    init_info = {
        "master_address": "127.0.0.1",
        "master_port": self.group_port,
        "rank_offset": 1,
        "world_size": self.get_world_size() + 1,
        "packed": True,
    }
    self._post(f"{self.base_url}/init_weight_transfer_engine", json={"init_info": init_info})
    self.communicator = CpuCommunicator(init_info)


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    import trl.generation.vllm_client as client
    import trl.generation.vllm_generation as generation

    BROADCASTS.clear()
    monkeypatch.setattr(generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(client, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(client, "_HAS_STATEFUL_TRAINER_ENGINE", True)
    monkeypatch.setattr(client, "packed_nccl_broadcast_producer", _producer, raising=False)
    monkeypatch.setattr(client.VLLMClient, "init_communicator", _init_communicator)
