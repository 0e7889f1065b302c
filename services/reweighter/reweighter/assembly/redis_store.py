"""Assembly state in Redis, shared by every replica: Lua scripts keep each operation atomic.

Keys under `prefix` (one Redis, not Redis Cluster: scripts touch the shared bookkeeping keys):
  g:{id}:meta, g:{id}:m (hash member -> record)   an open group; PEXPIRE open_ttl, refreshed
  g:{id}:res                                      a finished group's result; PEXPIRE result_ttl
  g:{id}:claim                                    who computes it (SET NX PX)
  open (zset id -> expiry ms), sizes (hash id -> members), held (counter)   the bounds
  done (pub/sub channel)                          finished group ids, to every replica
Bookkeeping of expired groups is pruned inside `add`, so the bounds heal themselves.

Every call has a short socket timeout and no retries: when Redis is gone a call fails fast with
StoreUnavailable, and the assembler turns that into an error or a timeout answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import StoreUnavailable
from .store import AddOutcome, AssemblyStore, Limits

log = logging.getLogger(__name__)

_ADD = """
local now = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 1000)
for _, g in ipairs(expired) do
  local n = tonumber(redis.call('HGET', KEYS[5], g) or '0')
  redis.call('DECRBY', KEYS[6], n)
  redis.call('HDEL', KEYS[5], g)
  redis.call('ZREM', KEYS[4], g)
end
local res = redis.call('GET', KEYS[3])
if res then return {'done', '0', res} end
local meta = redis.call('GET', KEYS[1])
local count = redis.call('HLEN', KEYS[2])
if meta and meta ~= ARGV[2] then return {'precondition', tostring(count), meta} end
if meta then
  local rec = redis.call('HGET', KEYS[2], ARGV[1])
  if rec then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
    redis.call('ZADD', KEYS[4], now + ttl, ARGV[9])
    return {'exists', tostring(count), rec}
  end
  if count >= tonumber(ARGV[4]) then return {'full', tostring(count), ''} end
elseif redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[7]) then
  return {'overloaded', '0', 'groups'}
end
if tonumber(redis.call('GET', KEYS[6]) or '0') >= tonumber(ARGV[8]) then
  return {'overloaded', '0', 'members'}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('ZADD', KEYS[4], now + ttl, ARGV[9])
redis.call('HINCRBY', KEYS[5], ARGV[9], 1)
redis.call('INCR', KEYS[6])
return {'added', tostring(count + 1), ''}
"""

_FINISH = """
local res = redis.call('GET', KEYS[3])
if res then return res end
redis.call('SET', KEYS[3], ARGV[1], 'PX', tonumber(ARGV[2]))
local n = tonumber(redis.call('HGET', KEYS[5], ARGV[3]) or '0')
if redis.call('ZREM', KEYS[4], ARGV[3]) == 1 then redis.call('DECRBY', KEYS[6], n) end
redis.call('HDEL', KEYS[5], ARGV[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[7])
redis.call('PUBLISH', ARGV[4], ARGV[3])
return ARGV[1]
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisStore(AssemblyStore):
    """Shared state for replicas. Completion reaches other replicas by pub/sub; since a message
    can be lost while the connection is down, waiters also poll (`polling = True`)."""

    polling = True

    def __init__(
        self,
        url: str,
        limits: Limits,
        prefix: str = "reweighter:asm:",
        *,
        socket_timeout_s: float = 2.0,
        max_connections: int = 32,
    ) -> None:
        import redis.asyncio as aioredis

        self.limits = limits
        self.prefix = prefix
        self.channel = f"{prefix}done"
        # A bounded pool: a burst of arrivals queues for a connection instead of opening
        # hundreds at once (a connect storm is what times out first under load).
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=None,  # waiting for a connection is bounded by the member's deadline
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=socket_timeout_s,
            retry_on_timeout=False,
            decode_responses=True,
        )
        self._redis = aioredis.Redis(connection_pool=pool)
        self._add = self._redis.register_script(_ADD)
        self._finish = self._redis.register_script(_FINISH)
        self._release = self._redis.register_script(_RELEASE)
        self._listener: asyncio.Task[None] | None = None

    def _keys(self, gid: str) -> list[str]:
        g, p = f"{self.prefix}g:{gid}", self.prefix
        return [
            f"{g}:meta", f"{g}:m", f"{g}:res", f"{p}open", f"{p}sizes", f"{p}held", f"{g}:claim"
        ]

    async def _call(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except Exception as e:  # redis ConnectionError, TimeoutError, ResponseError ...
            raise StoreUnavailable(f"assembly store (Redis) failed: {e}") from e

    async def add(
        self, group_id: str, member_id: str, meta: str, record: str, group_size: int
    ) -> AddOutcome:
        lim = self.limits
        args = [
            member_id,
            meta,
            record,
            group_size,
            int(time.time() * 1000),
            max(1, int(lim.open_ttl_s * 1000)),
            lim.max_open_groups,
            lim.max_held_members,
            group_id,
        ]
        kind, count, value = await self._call(self._add(keys=self._keys(group_id)[:6], args=args))
        return AddOutcome(kind, int(count), value)

    async def poll(self, group_id: str) -> tuple[str | None, int]:
        keys = self._keys(group_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(keys[2])
            pipe.hlen(keys[1])
            res, count = await self._call(pipe.execute())
        return res, int(count)

    async def members(self, group_id: str) -> dict[str, str]:
        return await self._call(self._redis.hgetall(self._keys(group_id)[1]))

    async def claim(self, group_id: str, token: str, ttl_s: float) -> bool:
        key = self._keys(group_id)[6]
        px = max(1, int(ttl_s * 1000))
        return bool(await self._call(self._redis.set(key, token, nx=True, px=px)))

    async def release(self, group_id: str, token: str) -> None:
        await self._call(self._release(keys=[self._keys(group_id)[6]], args=[token]))

    async def finish(self, group_id: str, result: str) -> str:
        args = [result, max(1, int(self.limits.result_ttl_s * 1000)), group_id, self.channel]
        return await self._call(self._finish(keys=self._keys(group_id), args=args))

    async def counts(self) -> tuple[int, int]:
        p = self.prefix
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zcount(f"{p}open", int(time.time() * 1000), "+inf")
            pipe.get(f"{p}held")
            groups, held = await self._call(pipe.execute())
        return int(groups), int(held or 0)

    async def start(self, on_done: Callable[[str], None]) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(on_done), name="assembly-pubsub")

    async def _listen(self, on_done: Callable[[str], None]) -> None:
        """Deliver finished group ids; reconnect with backoff after an outage (waiters poll
        meanwhile, so a message lost while disconnected only costs a poll interval)."""
        delay = 0.1
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                delay = 0.1
                while True:
                    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
                    if msg is not None and msg.get("type") == "message":
                        on_done(str(msg["data"]))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("assembly pub/sub lost (%s); reconnecting in %.1fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
        with contextlib.suppress(Exception):
            await self._redis.aclose()
