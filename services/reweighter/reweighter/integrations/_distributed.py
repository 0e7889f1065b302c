"""Gather, compute once on the main process, broadcast: the one collective the integrations use.

TRL calls a reward function on each process's slice of the batch, and one prompt's completions
may straddle two processes. `on_main` gathers every slice, runs the computation once on the main
process (one backend call per step, no group cut), and hands every process the result; a
failure there is raised on every process, so none waits forever. Single process: no collective.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")
V = TypeVar("V")


def world() -> tuple[int, int]:
    """(processes, this one's rank) of torch.distributed, or (1, 0) when it is not running."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch always has it
        return 1, 0
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def on_main(local: T, compute: Callable[[list[T]], R]) -> tuple[R, list[T], int]:
    """`compute` over every process's `local` (in rank order), run on the main process only and
    broadcast: (its result, every slice, this process's rank) on every process."""
    size, rank = world()
    if size == 1:
        return compute([local]), [local], 0
    import torch.distributed as dist

    slices: list[Any] = [None] * size
    dist.all_gather_object(slices, local)
    payload: list[Any] = [None]
    if rank == 0:
        try:
            payload[0] = ("ok", compute(slices))
        except Exception as e:  # every rank must learn of the failure, or they hang
            payload[0] = ("error", f"{type(e).__name__}: {e}")
    dist.broadcast_object_list(payload, src=0)
    status, value = payload[0]
    if status == "error":
        raise RuntimeError(f"reweighting failed on the main process: {value}")
    return value, slices, rank


def my_part(values: Sequence[V], sizes: Sequence[int], rank: int) -> list[V]:
    """This rank's part of `values`, a concatenation of parts of `sizes` in rank order."""
    start = sum(sizes[:rank])
    return list(values[start : start + sizes[rank]])
