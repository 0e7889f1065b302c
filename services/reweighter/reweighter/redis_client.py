"""Redis connections for every room that uses Redis (the embedding cache, the assembly store):
one construction, one set of defaults.

The defaults, and why:
- `SOCKET_TIMEOUT_S` for connecting and for each reply: a Redis on the same network answers in
  about a millisecond, so a reply this late means it is gone or stalled, and every caller has a
  better answer than waiting longer (the cache computes, the assembly answers by the member's
  deadline). A room that needs another value passes it by name with its reason.
- No retries inside redis-py: each caller has its own answer to a failed call, and a hidden
  retry would only add a timeout in front of it; redis-py reconnects on the next call.
- No health-check pings: a dead connection shows on the next call, which fails fast.
- No maintenance notifications (a Redis Enterprise feature, "auto" by default in redis-py 8):
  while they are on, redis-py's asyncio pool skips its check that a pooled connection is still
  open, so after a Redis restart every pooled connection of the assembly store failed once, one
  503 at a time, minutes after Redis was back (bench/bench_soak.py: 141 s and 249 s after, on a
  30-minute run). Off, a connection the old Redis closed is reopened as it leaves the pool.
- A bounded pool of `MAX_CONNECTIONS` per client: a burst of calls queues for a connection
  instead of opening hundreds at once (a connect storm is what times out first under load).
  Waiting for a connection has no timeout of its own: every call holding one ends within the
  socket timeout.

`warn_if_evicting`: a Redis that holds state (group assembly, the answer memory) must not evict
it, and Redis evicts per instance, so a state Redis with `maxmemory` and any policy but
`noeviction` (an `allkeys-lru` meant for the cache, or `volatile-*`: the state keys carry TTLs)
is said once, as a WARNING, where the operator looks (docs/operations.md, "Redis: state and
cache").

redis-py is imported on first use: the light client never needs it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis
    import redis.asyncio

log = logging.getLogger(__name__)

SOCKET_TIMEOUT_S = 2.0
"""Seconds to connect, and to wait for each reply."""
MAX_CONNECTIONS = 32
"""Connections one client opens at most."""


def _pool_options(socket_timeout_s: float, max_connections: int, decode: bool) -> dict[str, Any]:
    return {
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": socket_timeout_s,
        "health_check_interval": 0,
        "max_connections": max_connections,
        "timeout": None,  # waiting for a pooled connection: see the module docstring
        "decode_responses": decode,
    }


def sync_client(
    url: str,
    *,
    socket_timeout_s: float = SOCKET_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
    decode_responses: bool = False,
) -> redis.Redis:
    """A blocking client (call it from a worker thread, never on the event loop); `close()`
    releases its pool."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options = _pool_options(socket_timeout_s, max_connections, decode_responses)
    pool = redis.BlockingConnectionPool.from_url(url, retry=Retry(NoBackoff(), 0), **options)
    return redis.Redis.from_pool(pool)


def async_client(
    url: str,
    *,
    socket_timeout_s: float = SOCKET_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
    decode_responses: bool = False,
) -> redis.asyncio.Redis:
    """An asyncio client; `aclose()` releases its pool."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    options = _pool_options(socket_timeout_s, max_connections, decode_responses)
    try:  # redis-py 7+; older versions have none, and always check pooled connections
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # pragma: no cover - the pinned redis-py has them
        pass
    else:  # off: see the module docstring (a restarted Redis's closed connections are reopened)
        options["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    pool = aioredis.BlockingConnectionPool.from_url(url, retry=Retry(NoBackoff(), 0), **options)
    return aioredis.Redis.from_pool(pool)


async def warn_if_evicting(client: redis.asyncio.Redis, what: str) -> str | None:
    """Warn when the Redis behind `client`, which holds `what` (state), may evict it; returns its
    `maxmemory_policy` ("" without a maxmemory: nothing is evicted), None when it did not answer
    (the calls that need it will say so)."""
    try:
        info = await client.info("memory")
    except Exception:
        return None
    policy = str(info.get("maxmemory_policy", "")) if int(info.get("maxmemory", 0)) else ""
    if policy and policy != "noeviction":
        log.warning(
            "the Redis that holds %s runs maxmemory-policy %s: when full it evicts that state "
            "(members then wait out their timeout); give it noeviction and the embedding cache "
            "a Redis of its own (REWEIGHTER_CACHE_REDIS_URL; docs/operations.md)",
            what,
            policy,
        )
    return policy


__all__ = ["MAX_CONNECTIONS", "SOCKET_TIMEOUT_S", "async_client", "sync_client", "warn_if_evicting"]
