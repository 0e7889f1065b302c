"""Memory across training steps: per prompt key, how often each final answer was seen.

outcome_ucb (methods/outcome_ucb.py) reads it. One small interface (`AnswerMemory`, store.py)
with two stores: in process (the default) and Redis (`REDIS_URL` set: shared by every replica,
surviving a restart of the service). One contract suite (tests/memory/test_memory_contract.py)
runs every rule against both. The rules:

- `observe(prompt_key, step, answers)` returns, for each given answer, how often it was seen
  for that prompt at recorded steps **before** `step`, and records this call's answers as step
  `step`, **once per (prompt_key, step)**: a retried or duplicated call finds its step already
  recorded, records nothing and gets the identical counts (the steps below it did not change).
- Bounded: a prompt key not written for `memory_ttl_s` is forgotten, and beyond
  `memory_max_prompt_keys` the least recently written keys are dropped (their counts restart
  at 0). `size()` (prompt keys held) is the Prometheus gauge `reweighter_memory_prompt_keys`.
- Redis down: `observe` raises MemoryUnavailable (503 / UNAVAILABLE, naming the memory) and
  `reweighter_memory_errors_total` counts it. It never answers from an empty or partial
  memory: counts that silently restarted at 0 would be wrong numbers with a 200.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .store import AnswerMemory, InProcessMemory, memory_key

if TYPE_CHECKING:
    from ..config import Settings


def build_memory(settings: Settings) -> AnswerMemory:
    """Redis when `redis_url` is set (shared, survives restarts), else in process."""
    if settings.redis_url:
        from .redis_store import RedisMemory

        return RedisMemory(
            settings.redis_url,
            ttl_s=settings.memory_ttl_s,
            max_keys=settings.memory_max_prompt_keys,
            prefix=settings.memory_prefix,
        )
    return InProcessMemory(settings.memory_ttl_s, settings.memory_max_prompt_keys)


__all__ = ["AnswerMemory", "InProcessMemory", "build_memory", "memory_key"]
