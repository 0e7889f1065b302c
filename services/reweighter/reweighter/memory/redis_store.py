"""The Redis store of the answer memory: shared by every replica, surviving service restarts.

Per prompt key one hash `<prefix>k:<sha256(prompt_key)[:32]>`: field = step, value = that
step's answer counts (JSON). `HSETNX` makes "once per (prompt_key, step)" atomic across
replicas. A sorted set `<prefix>index` orders the keys by last write, for the bound on prompt
keys and for `size()`. One Lua script per observation does the write, the TTL, the bound and the
read in one round trip, atomically.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence

from ..errors import MemoryUnavailable
from .store import Observation, counts_before, memory_key

log = logging.getLogger(__name__)

_OBSERVE = """
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local now = tonumber(ARGV[4])
redis.call('ZADD', KEYS[2], now, KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]))
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  local old = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #old, 2 do redis.call('DEL', old[i]) end
end
return redis.call('HGETALL', KEYS[1])
"""


class RedisMemory:
    def __init__(self, url: str, *, ttl_s: float, max_keys: int, prefix: str) -> None:
        from reweighter.redis_client import sync_client

        self.url = url
        self.ttl_s = int(max(1, ttl_s))
        self.max_keys = max_keys
        self.prefix = prefix
        self.errors = 0
        self._redis = sync_client(url, decode_responses=True)
        self._script = self._redis.register_script(_OBSERVE)

    def _fail(self, exc: Exception) -> MemoryUnavailable:
        self.errors += 1
        log.warning("answer memory: redis failed (%s: %s)", type(exc).__name__, exc)
        return MemoryUnavailable(
            f"the answer memory (Redis) cannot be reached: {type(exc).__name__}; outcome_ucb "
            "needs it (no counts are guessed); retry when Redis is back",
            field="memory",
        )

    def observe_many(self, items: Sequence[Observation]) -> list[dict[str, int]]:
        import redis

        index = self.prefix + "index"
        now = time.time()
        try:
            pipe = self._redis.pipeline(transaction=False)
            for prompt_key, step, answers in items:
                counts: dict[str, int] = {}
                for a in answers:
                    counts[a] = counts.get(a, 0) + 1
                self._script(
                    keys=[self.prefix + "k:" + memory_key(prompt_key), index],
                    args=[step, json.dumps(counts), self.ttl_s, now, self.max_keys],
                    client=pipe,
                )
            replies = pipe.execute()
        except (redis.RedisError, OSError) as e:
            raise self._fail(e) from e
        out = []
        for (_, step, answers), flat in zip(items, replies, strict=True):
            steps = {int(s): json.loads(v) for s, v in _pairs(flat)}
            before = counts_before(steps, step)
            out.append({a: before.get(a, 0) for a in answers})
        return out

    def size(self) -> int:
        import redis

        try:
            return int(self._redis.zcard(self.prefix + "index"))
        except (redis.RedisError, OSError):
            self.errors += 1
            return -1

    def close(self) -> None:
        self._redis.close()


def _pairs(flat: object) -> list[tuple[str, str]]:
    """HGETALL through a script comes back as a flat list [field, value, ...]."""
    if isinstance(flat, dict):
        return list(flat.items())
    seq = list(flat)  # type: ignore[call-overload]
    return list(zip(seq[0::2], seq[1::2], strict=True))
