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
- A bounded pool of `MAX_CONNECTIONS` per client: a burst of calls queues for a connection
  instead of opening hundreds at once (a connect storm is what times out first under load).
  Waiting for a connection has no timeout of its own: every call holding one ends within the
  socket timeout.

redis-py is imported on first use: the light client never needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis
    import redis.asyncio

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
    pool = aioredis.BlockingConnectionPool.from_url(url, retry=Retry(NoBackoff(), 0), **options)
    return aioredis.Redis.from_pool(pool)


__all__ = ["MAX_CONNECTIONS", "SOCKET_TIMEOUT_S", "async_client", "sync_client"]
