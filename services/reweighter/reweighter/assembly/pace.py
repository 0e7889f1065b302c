"""Pace: at most `per_tick` members go through the assembler per event-loop iteration.

Why: asyncio runs every ready callback of an iteration before it looks at the sockets again.
Members arrive and time out in bursts (a thousand keep-alive connections whose members all
reach their deadline together, each answer followed at once by that connection's next member),
and each member's step (check, store, answer, response) is a millisecond or more of Python. A
thousand such steps in one iteration held the loop for seconds, and /healthz, whose bytes
were waiting in the socket, was read only after them (issue 29: up to 4.4 s, where our liveness
probe gives up at 3 s). Members beyond the budget wait on a future, which costs nothing in the
iteration, and go through in the next ones, so an iteration stays short and the loop reads its
sockets between slices of the burst. The burst itself is served as fast as before: the same
work, in slices.

Where: one `Pace` per replica (`GroupAssembler.pace`), two turns per member, one per event that
comes in bursts: its arrival, taken by the transport that admits it (the HTTP edge for
/v1/groups/, api/grpc's servicer), and its answer, taken in its round (round.py, `Round.wait`:
a round's result or a deadline wakes all its waiters at once). The assembler takes none.
"""

from __future__ import annotations

import asyncio
from collections import deque

PER_TICK = 32
"""Members per iteration: at about 1 ms each, an iteration stays near 30 ms of assembly work."""


class Pace:
    """`await pace.turn()` before a member's step; see the module docstring."""

    def __init__(self, per_tick: int = PER_TICK) -> None:
        self.per_tick = per_tick
        self._passed = 0  # turns given in this iteration
        self._queue: deque[asyncio.Future[None]] = deque()
        self._ticking = False

    async def turn(self) -> None:
        if not self._queue and self._passed < self.per_tick:
            self._passed += 1
            self._tick_next()
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(waiter)
        self._tick_next()
        await waiter

    @property
    def waiting(self) -> int:
        """Members waiting for a turn now."""
        return len(self._queue)

    def _tick_next(self) -> None:
        if not self._ticking:
            self._ticking = True
            asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        """A new iteration: a new budget, first to those waiting longest."""
        self._ticking = False
        self._passed = 0
        while self._queue and self._passed < self.per_tick:
            waiter = self._queue.popleft()
            if not waiter.done():  # a cancelled waiter gives its turn to the next
                waiter.set_result(None)
                self._passed += 1
        if self._queue or self._passed:
            self._tick_next()
