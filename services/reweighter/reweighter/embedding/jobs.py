"""What the batcher keeps per text and per request, and the messages its worker reads.

Ownership (why it is split this way): the worker thread alone writes what the policy reads
(a job's pieces and cursor, a request's turn) and what it computes (vectors, results), so it
plans with no lock held. The event loop and the tokenising helper never touch those: they
post messages (`NewRequest`, `Split`, `Abandon`) to the worker's inbox. What callers share
(the in-flight registry, each job's waiters, a request's count of open texts) is guarded by
the batcher's small lock, held for a dictionary lookup or a list update, never for a plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from reweighter.embedding.base import Piece
from reweighter.embedding.plan import LengthIndex
from reweighter.tenancy import DEFAULT_TENANT, Deadline
from reweighter.timings import RequestTimings


@dataclass(eq=False)
class Job:
    """One distinct text in flight; shared by every request that asked for it."""

    text: str
    pieces: list[Piece] | None = None  # None until split (worker-owned once set)
    vecs: np.ndarray | None = None
    scheduled: int = 0  # pieces handed to a round (worker-owned)
    done: int = 0  # pieces computed (worker-owned)
    result: np.ndarray | None = None
    error: BaseException | None = None
    waiters: list[Request] = field(default_factory=list)  # under the batcher's lock

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None


@dataclass(eq=False)
class Request:
    jobs: list[Job]
    index: list[int]  # text i of the request -> jobs[index[i]]
    future: asyncio.Future[np.ndarray]
    loop: asyncio.AbstractEventLoop
    open_jobs: int = 0  # under the batcher's lock
    resolved: bool = False  # under the batcher's lock
    seq: int = 0  # arrival order
    turn: int = -1  # the last round that served it (-1: never; worker-owned)
    timings: RequestTimings | None = None  # filled in for the service's metrics, if collected
    submitted: float = field(default_factory=time.perf_counter)
    tenant: str = DEFAULT_TENANT  # whose request (the policy shares the encoder by tenant)
    weight: float = 1.0  # that tenant's weight
    deadline: Deadline | None = None  # past it (or its client gone) it is dropped unserved
    # its schedulable texts by next-piece length, for the policy (plan.LengthIndex; worker-owned)
    length_index: LengthIndex | None = None

    @property
    def live(self) -> bool:
        return not self.resolved and not self.future.cancelled()

    def deliver(self, value: np.ndarray | None, exc: BaseException | None) -> None:
        """Hand the answer to the caller's event loop (from any thread)."""
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            self.loop.call_soon_threadsafe(_resolve, self.future, value, exc)


def _resolve(fut: asyncio.Future, value: np.ndarray | None, exc: BaseException | None) -> None:
    if fut.done():  # the caller was cancelled (client went away): nothing to deliver
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


# -- the worker's inbox -----------------------------------------------------------------------
@dataclass(frozen=True)
class NewRequest:
    """A request joins the rotation."""

    request: Request


@dataclass(frozen=True)
class Split:
    """A text's pieces are ready (the tokenising helper finished it)."""

    job: Job
    pieces: list[Piece]


@dataclass(frozen=True)
class Abandon:
    """Every caller of this text went away: stop computing it."""

    job: Job


Message = NewRequest | Split | Abandon
