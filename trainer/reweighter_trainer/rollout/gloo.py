"""The weight-sync wire between the trainer and a CPU rollout server: a torch gloo group.

Both ends import this module (the trainer's venv has no vLLM; the rollout venv has no TRL
trainer), so it needs nothing but the standard library and torch. It defines, once:

- the rendezvous: the trainer hosts a `TCPStore` on `master_port` and is rank 0; the rollout
  server's workers join as ranks `rank_offset + worker_rank` (`init_info`, sent to vLLM's
  `/init_weight_transfer_engine`);
- an update: the tensors named in `update_info` (`names`, `dtype_names`, `shapes`, as TRL's
  client sends them to `/update_weights`) are broadcast from rank 0 in buckets that both ends
  compute from the metadata alone (`plan_buckets`), so no extra message says where one ends.

Why gloo: it is torch's own CPU collective backend, present in every torch build; NCCL (what
vLLM's and TRL's weight sync use) needs CUDA.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlparse

import torch
import torch.distributed as dist

BACKEND = "gloo"
"""The backend name of the vLLM weight-transfer engine (`--weight-transfer-config`)."""
BUCKET_BYTES = 64 << 20
"""Consecutive tensors of one dtype are flattened into broadcasts of at most this size."""
STORE_PREFIX = "reweighter-weight-sync"


@dataclass(frozen=True)
class InitInfo:
    """Where the trainer's rendezvous is, and the group's shape."""

    master_address: str
    master_port: int
    world_size: int
    rank_offset: int = 1
    timeout_s: float = 120.0

    @classmethod
    def from_dict(cls, d: dict) -> InitInfo:
        try:
            return cls(
                master_address=str(d["master_address"]),
                master_port=int(d["master_port"]),
                world_size=int(d["world_size"]),
                rank_offset=int(d.get("rank_offset", 1)),
                timeout_s=float(d.get("timeout_s", 120.0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"init_info: {type(e).__name__}: {e} (got {d!r})") from e

    def as_dict(self) -> dict:
        return {
            "master_address": self.master_address,
            "master_port": self.master_port,
            "world_size": self.world_size,
            "rank_offset": self.rank_offset,
            "timeout_s": self.timeout_s,
        }


def open_group(info: InitInfo, rank: int) -> dist.ProcessGroup:
    """A gloo group of `info.world_size` ranks, outside torch's default group (the trainer's
    accelerate group and vLLM's own groups are left alone). Rank 0 hosts the store."""
    timeout = timedelta(seconds=info.timeout_s)
    store = dist.TCPStore(
        host_name=info.master_address,
        port=info.master_port,
        world_size=info.world_size,
        is_master=rank == 0,
        timeout=timeout,
        use_libuv=False,
    )
    return dist.ProcessGroupGloo(
        dist.PrefixStore(STORE_PREFIX, store), rank, info.world_size, timeout
    )


def parse_update_info(d: dict) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """`{"names", "dtype_names", "shapes"}` -> [(name, dtype, shape)], each field checked."""
    try:
        names, dtypes, shapes = d["names"], d["dtype_names"], d["shapes"]
    except KeyError as e:
        raise ValueError(f"update_info: missing {e.args[0]!r}") from e
    if not (len(names) == len(dtypes) == len(shapes)):
        raise ValueError(
            f"update_info: names, dtype_names and shapes differ in length "
            f"({len(names)}, {len(dtypes)}, {len(shapes)})"
        )
    out = []
    for name, dtype_name, shape in zip(names, dtypes, shapes, strict=True):
        dtype = getattr(torch, str(dtype_name).removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"update_info.dtype_names: {dtype_name!r} (for {name}) is no dtype")
        out.append((str(name), dtype, tuple(int(s) for s in shape)))
    return out


def plan_buckets(
    meta: Sequence[tuple[str, torch.dtype, tuple[int, ...]]], bucket_bytes: int = BUCKET_BYTES
) -> list[list[int]]:
    """Indices of `meta` grouped into broadcasts: consecutive, one dtype, <= bucket_bytes (a
    larger tensor goes alone). Sender and receiver call this on the same metadata."""
    buckets: list[list[int]] = []
    size = 0
    for i, (_, dtype, shape) in enumerate(meta):
        nbytes = _numel(shape) * dtype.itemsize
        last = buckets[-1] if buckets else None
        if last is not None and meta[last[0]][1] == dtype and size + nbytes <= bucket_bytes:
            last.append(i)
            size += nbytes
        else:
            buckets.append([i])
            size = nbytes
    return buckets


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _broadcast(group: dist.ProcessGroup, flat: torch.Tensor) -> None:
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    group.broadcast([flat], opts).wait()


def send(
    group: dist.ProcessGroup,
    meta: Sequence[tuple[str, torch.dtype, tuple[int, ...]]],
    tensors: Iterable[tuple[str, torch.Tensor]],
) -> int:
    """Rank 0: broadcast `tensors` (in `meta`'s order) bucket by bucket; returns bytes sent."""
    it = iter(tensors)
    sent = 0
    for bucket in plan_buckets(meta):
        parts = []
        for i in bucket:
            name, tensor = next(it)
            want = meta[i]
            if name != want[0] or tuple(tensor.shape) != want[2] or tensor.dtype != want[1]:
                raise ValueError(
                    f"tensor {name} {tuple(tensor.shape)} {tensor.dtype} does not match the "
                    f"announced {want[0]} {want[2]} {want[1]}"
                )
            parts.append(tensor.detach().reshape(-1).to("cpu"))
        flat = torch.cat(parts) if len(parts) > 1 else parts[0].contiguous()
        _broadcast(group, flat)
        sent += flat.numel() * flat.element_size()
    return sent


def receive(
    group: dist.ProcessGroup, meta: Sequence[tuple[str, torch.dtype, tuple[int, ...]]]
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Other ranks: yield each bucket's (name, tensor) pairs as they arrive."""
    for bucket in plan_buckets(meta):
        sizes = [_numel(meta[i][2]) for i in bucket]
        flat = torch.empty(sum(sizes), dtype=meta[bucket[0]][1])
        _broadcast(group, flat)
        pieces = torch.split(flat, sizes)
        yield [
            (meta[i][0], piece.view(meta[i][2]))
            for i, piece in zip(bucket, pieces, strict=True)
        ]


def address_towards(url: str) -> str:
    """This host's address on the route to `url`'s host: what a server there can connect back
    to (127.0.0.1 for a loopback server; the container's bridge address in compose)."""
    host = urlparse(url).hostname or "127.0.0.1"
    if host in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))  # UDP connect: no packet is sent
        return s.getsockname()[0]
