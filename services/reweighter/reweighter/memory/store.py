"""The memory interface and its in-process store (see the package docstring for the rules)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

Observation = tuple[str, int, Sequence[str]]
"""(prompt_key, step, the group's non-null answers)."""


def memory_key(prompt_key: str) -> str:
    """A fixed-length key for a prompt key of any length (prompt texts can be long)."""
    return hashlib.sha256(prompt_key.encode("utf-8")).hexdigest()[:32]


def counts_before(steps: dict[int, dict[str, int]], step: int) -> Counter[str]:
    """The answers' counts summed over the recorded steps below `step`."""
    total: Counter[str] = Counter()
    for s, counts in steps.items():
        if s < step:
            total.update(counts)
    return total


class AnswerMemory(Protocol):
    errors: int
    """Failed store operations so far (the metric reweighter_memory_errors_total)."""

    def observe_many(self, items: Sequence[Observation]) -> list[dict[str, int]]:
        """Per item: each of its answers' count at earlier steps; records each (key, step)
        once. Raises MemoryUnavailable when the store cannot be reached."""
        ...

    def size(self) -> int:
        """Prompt keys held (-1 when the store cannot be reached)."""
        ...

    def close(self) -> None: ...


@dataclass
class _Entry:
    expires_at: float
    steps: dict[int, dict[str, int]] = field(default_factory=dict)


class InProcessMemory:
    """The default store: a dict in this process, LRU by last write, with a TTL per key."""

    def __init__(
        self, ttl_s: float, max_keys: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self.errors = 0
        self._clock = clock
        self._keys: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def observe_many(self, items: Sequence[Observation]) -> list[dict[str, int]]:
        out = []
        with self._lock:
            now = self._clock()
            self._expire(now)
            for prompt_key, step, answers in items:
                key = memory_key(prompt_key)
                entry = self._keys.pop(key, None) or _Entry(now + self.ttl_s)
                entry.steps.setdefault(step, dict(Counter(answers)))
                entry.expires_at = now + self.ttl_s
                self._keys[key] = entry  # most recently written last
                while len(self._keys) > self.max_keys:
                    self._keys.popitem(last=False)
                before = counts_before(entry.steps, step)
                out.append({a: before.get(a, 0) for a in answers})
        return out

    def _expire(self, now: float) -> None:
        while self._keys:
            key, entry = next(iter(self._keys.items()))
            if entry.expires_at > now:
                break  # ordered by last write: the rest expire later
            del self._keys[key]

    def size(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._keys)

    def close(self) -> None:
        pass
