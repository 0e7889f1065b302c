"""Assembly state in Redis, shared by every replica: Lua scripts keep each operation atomic.

Keys under `prefix` (one Redis, not Redis Cluster: scripts touch the shared bookkeeping keys):
  g:{id}:meta, g:{id}:m (hash member -> record), g:{id}:on (its round number)
                          the open round; expire at the latest deadline of its members + margin
  g:{id}:res:{k}, g:{id}:rn, g:{id}:ans (hash member -> its last answered round)
                          round k's result, the last answered round; PEXPIRE result_ttl
  g:{id}:claim            who computes or closes the open round (SET NX PX)
  open (zset id -> expiry ms), sizes (hash id -> members), held (counter)   the bounds
  done (pub/sub channel)  "{k}:{id}" of every answered round, to every replica
Bookkeeping of expired groups is pruned inside `add` and `counts`, so the bounds heal themselves.
Values are the canonical JSON of records.py's versioned models.

The connection is reweighter.redis_client's (its socket timeout, no retries): when Redis is gone
a call fails fast with StoreUnavailable, and the assembler turns that into an error or a timeout
answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..errors import StoreUnavailable
from ..limits import AssemblyLimits
from ..redis_client import SOCKET_TIMEOUT_S, async_client, warn_if_evicting
from .machine import AddOutcome, Arrival, outcome
from .records import GroupMeta, MemberRecord, OpenRound, RoundResult
from .store import AssemblyStore, OnDone, stop_if_cancelled

log = logging.getLogger(__name__)

# KEYS: meta, m, on, rn, res prefix, open, sizes, held, claim, ans
# Time is the Redis server's (`TIME`), the one clock of every replica sharing it: expiries in
# the `open` set and key TTLs never mix replicas' wall clocks.
_PRUNE = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function prune(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 1000)
  for _, g in ipairs(expired) do
    local n = tonumber(redis.call('HGET', KEYS[7], g) or '0')
    redis.call('DECRBY', KEYS[8], n)
    redis.call('HDEL', KEYS[7], g)
    redis.call('ZREM', KEYS[6], g)
  end
end
"""

# machine.RULES in their order; each branch answers {rule name, round, count, value}.
# ARGV: member, meta, record, size, (unused), ttl ms, max groups, max held, group id, after round
_ADD = _PRUNE + """
local now = now_ms()
local ttl = tonumber(ARGV[6])
prune(now)
if tonumber(ARGV[10]) < 0 then
  local mine = redis.call('HGET', KEYS[10], ARGV[1])
  if mine then
    local res = redis.call('GET', KEYS[5] .. mine)
    if res then return {'own_answer', mine, '0', res} end
  end
end
local rn = tonumber(redis.call('GET', KEYS[4]) or '-1')
local latest = nil
if rn >= 0 then latest = redis.call('GET', KEYS[5] .. rn) end
if latest and rn > tonumber(ARGV[10]) then return {'newer_answer', tostring(rn), '0', latest} end
if not latest then rn = -1 end
local meta = redis.call('GET', KEYS[1])
local count = redis.call('HLEN', KEYS[2])
local on = tonumber(redis.call('GET', KEYS[3]) or tostring(rn + 1))
local function extend()
  for _, k in ipairs({KEYS[1], KEYS[2], KEYS[3]}) do
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
  end
  redis.call('ZADD', KEYS[6], 'GT', now + ttl, ARGV[9])
end
if meta then
  if meta ~= ARGV[2] then return {'other_settings', tostring(on), tostring(count), meta} end
  local rec = redis.call('HGET', KEYS[2], ARGV[1])
  if rec then
    extend()
    return {'present', tostring(on), tostring(count), rec}
  end
  if count >= tonumber(ARGV[4]) then return {'whole', tostring(on), tostring(count), ''} end
elseif redis.call('ZCARD', KEYS[6]) >= tonumber(ARGV[7]) then
  return {'groups_bound', '0', '0', 'groups'}
end
if tonumber(redis.call('GET', KEYS[8]) or '0') >= tonumber(ARGV[8]) then
  return {'members_bound', '0', '0', 'members'}
end
if not meta then
  on = rn + 1
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
  redis.call('SET', KEYS[3], tostring(on), 'PX', ttl)
  redis.call('DEL', KEYS[2])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
extend()
redis.call('HINCRBY', KEYS[7], ARGV[9], 1)
redis.call('INCR', KEYS[8])
return {'joins', tostring(on), tostring(count + 1), ''}
"""

# ARGV: result, result ttl ms, group id, channel, round, member count, member ids...
_FINISH = """
local k = ARGV[5]
local res = redis.call('GET', KEYS[5] .. k)
if res then return res end
if redis.call('GET', KEYS[3]) ~= k or not redis.call('GET', KEYS[1]) then return '' end
if redis.call('HLEN', KEYS[2]) ~= tonumber(ARGV[6]) then return '' end
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[5] .. k, ARGV[1], 'PX', ttl)
local rn = tonumber(redis.call('GET', KEYS[4]) or '-1')
if tonumber(k) > rn then redis.call('SET', KEYS[4], k, 'PX', ttl) end
for i = 7, #ARGV do redis.call('HSET', KEYS[10], ARGV[i], k) end
redis.call('PEXPIRE', KEYS[10], ttl)
local n = tonumber(redis.call('HGET', KEYS[7], ARGV[3]) or '0')
if redis.call('ZREM', KEYS[6], ARGV[3]) == 1 then redis.call('DECRBY', KEYS[8], n) end
redis.call('HDEL', KEYS[7], ARGV[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[9])
redis.call('PUBLISH', ARGV[4], k .. ':' .. ARGV[3])
return ARGV[1]
"""

_COUNTS = _PRUNE + """
prune(now_ms())
return {redis.call('ZCARD', KEYS[6]), tonumber(redis.call('GET', KEYS[8]) or '0')}
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class RedisStore(AssemblyStore):
    """Shared state for replicas. Completion reaches other replicas by pub/sub; since a message
    can be lost while the connection is down, waiters also poll (`polling = True`)."""

    polling = True

    def __init__(
        self,
        url: str,
        limits: AssemblyLimits,
        prefix: str = "reweighter:asm:",
        *,
        socket_timeout_s: float = SOCKET_TIMEOUT_S,
    ) -> None:
        self.limits = limits
        self.prefix = prefix
        self.channel = f"{prefix}done"
        # the defaults of reweighter.redis_client (bounded pool, no retries); every wait here
        # is also bounded by the member's deadline. Text replies: records are JSON.
        self._redis = async_client(url, socket_timeout_s=socket_timeout_s, decode_responses=True)
        self._add_script = self._redis.register_script(_ADD)
        self._finish = self._redis.register_script(_FINISH)
        self._counts = self._redis.register_script(_COUNTS)
        self._release = self._redis.register_script(_RELEASE)
        self._renew = self._redis.register_script(_RENEW)
        self._listener: asyncio.Task[None] | None = None

    def _keys(self, gid: str) -> list[str]:
        g, p = f"{self.prefix}g:{gid}", self.prefix
        return [
            f"{g}:meta", f"{g}:m", f"{g}:on", f"{g}:rn", f"{g}:res:",
            f"{p}open", f"{p}sizes", f"{p}held", f"{g}:claim", f"{g}:ans",
        ]  # fmt: skip

    async def _call(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except Exception as e:  # redis ConnectionError, TimeoutError, ResponseError ...
            raise StoreUnavailable(f"assembly store (Redis) failed: {e}") from e

    async def _add(self, a: Arrival) -> AddOutcome:
        lim = self.limits
        args = [
            a.member_id,
            a.meta.dump(),
            a.record.dump(),
            a.group_size,
            0,  # the time is the server's (TIME in the script)
            max(1, int(a.ttl_s * 1000)),
            lim.max_open_groups,
            lim.max_held_members,
            a.group_id,
            a.after_round,
        ]
        name, rnd, count, value = await self._call(
            self._add_script(keys=self._keys(a.group_id), args=args)
        )
        return outcome(name, int(rnd), int(count), value)[1]

    async def poll(self, group_id: str, round: int) -> tuple[RoundResult | None, int]:
        keys = self._keys(group_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(f"{keys[4]}{round}")
            pipe.get(keys[2])
            pipe.hlen(keys[1])
            res, on, count = await self._call(pipe.execute())
        if res is not None:
            return RoundResult.load(res), 0
        return None, int(count) if on == str(round) else 0

    async def members(self, group_id: str) -> OpenRound | None:
        keys = self._keys(group_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.get(keys[0])
            pipe.get(keys[2])
            pipe.hgetall(keys[1])
            meta, on, records = await self._call(pipe.execute())
        if meta is None or on is None:
            return None
        return OpenRound(
            round=int(on),
            meta=GroupMeta.load(meta),
            members={mid: MemberRecord.load(rec) for mid, rec in records.items()},
        )

    async def claim(self, group_id: str, token: str, ttl_s: float) -> bool:
        key = self._keys(group_id)[8]
        px = max(1, int(ttl_s * 1000))
        return bool(await self._call(self._redis.set(key, token, nx=True, px=px)))

    async def renew(self, group_id: str, token: str, ttl_s: float) -> bool:
        key = self._keys(group_id)[8]
        px = max(1, int(ttl_s * 1000))
        return bool(await self._call(self._renew(keys=[key], args=[token, px])))

    async def release(self, group_id: str, token: str) -> None:
        await self._call(self._release(keys=[self._keys(group_id)[8]], args=[token]))

    async def finish(self, group_id: str, result: RoundResult) -> RoundResult | None:
        args = [
            result.dump(),
            max(1, int(self.limits.result_ttl_s * 1000)),
            group_id,
            self.channel,
            result.round,
            len(result.ids),
            *result.ids,
        ]
        stored = await self._call(self._finish(keys=self._keys(group_id), args=args))
        return RoundResult.load(stored) if stored else None

    async def counts(self) -> tuple[int, int]:
        keys = self._keys("")
        groups, held = await self._call(
            self._counts(keys=keys[:8])
        )
        return int(groups), int(held)

    async def start(self, on_done: OnDone) -> None:
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(on_done), name="assembly-pubsub")

    async def _listen(self, on_done: OnDone) -> None:
        """Deliver answered rounds; reconnect with backoff after an outage (waiters poll
        meanwhile, so a message lost while disconnected only costs a poll interval)."""
        await warn_if_evicting(self._redis, "group assembly and the answer memory")  # once
        delay = 0.1
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                delay = 0.1
                while True:
                    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
                    if msg is not None and msg.get("type") == "message":
                        rnd, _, gid = str(msg["data"]).partition(":")
                        on_done(gid, int(rnd))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                stop_if_cancelled(e)
                log.warning("assembly pub/sub lost (%s); reconnecting in %.1fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def aclose(self) -> None:
        """Bounded: redis-py can hold a cancelled `get_message` until its connection closes,
        so the connections are closed too before the listener is waited for."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.wait({listener}, timeout=0.2)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._redis.aclose(), 2.0)
        if listener is not None:
            await asyncio.wait({listener}, timeout=2.0)
