"""reweighter.redis_client: the one construction of a Redis client, with its documented defaults
(socket timeout, no retries, a bounded pool the client owns), used by the embedding cache and the
assembly store."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from reweighter.assembly.redis_store import RedisStore
from reweighter.embedding.cache import RedisCache
from reweighter.limits import AssemblyLimits
from reweighter.redis_client import MAX_CONNECTIONS, SOCKET_TIMEOUT_S, async_client, sync_client


def _silent_server() -> tuple[socket.socket, list[socket.socket]]:
    """A loopback port that accepts connections and never answers; returns the accepted ones."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return listener, accepted


def test_a_silent_redis_fails_after_the_socket_timeout() -> None:
    """A Redis that accepts and never answers costs the caller the socket timeout, not more."""
    listener, accepted = _silent_server()
    client = sync_client(f"redis://127.0.0.1:{listener.getsockname()[1]}/0", socket_timeout_s=0.3)
    try:
        start = time.monotonic()
        with pytest.raises(redis.exceptions.TimeoutError):
            client.get("k")
        took = time.monotonic() - start
        assert 0.25 <= took < 1.5, took  # the given timeout, not the 2 s default
        assert len(accepted) == 1
    finally:
        client.close()
        listener.close()


async def test_async_client_has_the_same_defaults() -> None:
    listener, accepted = _silent_server()
    client = async_client(f"redis://127.0.0.1:{listener.getsockname()[1]}/0", socket_timeout_s=0.3)
    try:
        start = time.monotonic()
        with pytest.raises(redis.exceptions.TimeoutError):
            await client.get("k")
        assert 0.25 <= time.monotonic() - start < 1.5
    finally:
        await client.aclose()
        listener.close()


async def test_each_room_builds_its_client_here(shared_redis_url: str) -> None:
    """The assembly store takes the defaults; the cache passes its shorter timeout."""
    store = RedisStore(shared_redis_url, AssemblyLimits(10, 10, 1.0))
    cache = RedisCache(shared_redis_url, ttl_s=60)
    try:
        for client, timeout in ((store._redis, SOCKET_TIMEOUT_S), (cache._client, 0.25)):
            pool = client.connection_pool
            assert pool.connection_kwargs["socket_timeout"] == timeout
            assert pool.connection_kwargs["socket_connect_timeout"] == timeout
            assert pool.max_connections == MAX_CONNECTIONS
            assert client.auto_close_connection_pool  # closing the client closes its pool
        assert await store._redis.ping() and cache._client.ping()
    finally:
        await store.aclose()
        cache.close()


async def test_connections_a_restarted_redis_closed_are_reopened_not_failed(redis_server) -> None:
    """A Redis restart closes every pooled connection; each is reopened as it leaves the pool,
    so once Redis is back no call fails. Before (redis-py 8's maintenance notifications on:
    its asyncio pool then skips that check), each of the 20 pooled connections failed its next
    call once: bench/bench_soak.py saw those 503s minutes after the restart."""
    import asyncio

    client = async_client(redis_server.url)
    try:
        await asyncio.gather(*(client.get("k") for _ in range(20)))  # 20 connections pooled
        redis_server.stop()
        redis_server.start()
        await asyncio.sleep(0.5)  # the loop reads each connection's end-of-file
        got = await asyncio.gather(*(client.get("k") for _ in range(25)), return_exceptions=True)
        assert [g for g in got if isinstance(g, Exception)] == []
    finally:
        await client.aclose()
