"""Caches: LRU bounded in bytes, Redis against a real server, and surviving a Redis outage."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid

import numpy as np
import pytest
import redis

from reweighter.embedding import CachingEmbedder, LRUCache, RedisCache, TieredCache
from reweighter.embedding.cache import cache_key

from .support import CountingEncoder, bundled_encoder, fresh_view

DIM = 384


def vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def test_cache_key_is_namespace_and_sha256() -> None:
    assert cache_key("m|chunk_mean|256", "hello") == (
        "m|chunk_mean|256:" + hashlib.sha256(b"hello").hexdigest()
    )
    assert cache_key("m|head|256", "hello") != cache_key("m|tail|256", "hello")


def test_lru_hit_returns_the_same_vector() -> None:
    cache = LRUCache(1 << 20)
    v = vec(0)
    cache.set_many({"a": v})
    got_a, got_b = cache.get_many(["a", "b"])
    assert got_b is None and np.array_equal(got_a, v)
    v[0] = 123.0  # the caller's array is not the stored one
    assert cache.get_many(["a"])[0][0] != 123.0
    with pytest.raises(ValueError):
        cache.get_many(["a"])[0][0] = 1.0  # stored vectors are read-only


def test_lru_evicts_least_recent_by_bytes() -> None:
    # Each entry costs its 1536 vector bytes plus bookkeeping under 1 KiB: 10 KiB hold 4 to 6.
    cache = LRUCache(10_000)
    for i in range(20):
        cache.set_many({f"k{i}": vec(i)})
        if i == 17:
            cache.get_many(["k15"])  # touch: k15 becomes the most recent of the old ones
    assert cache.nbytes <= 10_000 and 4 <= len(cache) <= 6
    present = [k for k in (f"k{i}" for i in range(20)) if cache.get_many([k])[0] is not None]
    assert "k19" in present and "k15" in present and "k0" not in present
    assert len(present) == len(cache)


def test_lru_refuses_oversized_entries_and_rejects_bad_bounds() -> None:
    cache = LRUCache(1000)
    cache.set_many({"big": vec(1)})  # 1536 bytes > 1000: never stored, nothing evicted for it
    assert len(cache) == 0 and cache.nbytes == 0
    with pytest.raises(ValueError):
        LRUCache(0)


def test_lru_is_thread_safe() -> None:
    cache = LRUCache(50 * 2000)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(300):
                cache.set_many({f"{t}-{i}": vec(i % 7)})
                cache.get_many([f"{t}-{i - 1}", f"{(t + 1) % 4}-{i}"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert cache.nbytes <= 50 * 2000
    assert cache.nbytes == sum(v.nbytes + len(k) + 200 for k, v in cache._items.items())


def test_redis_roundtrip_with_ttl(shared_redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    cache = RedisCache(shared_redis_url, ttl_s=60, prefix=prefix)
    raw = redis.Redis.from_url(shared_redis_url)
    try:
        cache.set_many({"a": vec(1), "b": vec(2)})
        got = cache.get_many(["b", "missing", "a"])
        assert got[1] is None
        assert np.array_equal(got[0], vec(2)) and np.array_equal(got[2], vec(1))
        assert raw.strlen(prefix + "a") == DIM * 4  # float32 bytes, nothing else
        assert 0 < raw.ttl(prefix + "a") <= 60
        assert cache.errors == 0
    finally:
        raw.delete(prefix + "a", prefix + "b")
        cache.close()


def test_tiered_cache_promotes_redis_hits(shared_redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    back = RedisCache(shared_redis_url, ttl_s=60, prefix=prefix)
    raw = redis.Redis.from_url(shared_redis_url)
    try:
        back.set_many({"k": vec(3)})  # another replica computed it
        tiered = TieredCache(LRUCache(1 << 20), back)
        assert tiered.front.get_many(["k"]) == [None]
        assert np.array_equal(tiered.get_many(["k"])[0], vec(3))
        assert np.array_equal(tiered.front.get_many(["k"])[0], vec(3))
    finally:
        raw.delete(prefix + "k")
        back.close()


def test_embedder_shares_vectors_through_redis(shared_redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    first = CachingEmbedder(fresh_view(), RedisCache(shared_redis_url, 60, prefix=prefix))
    counting = CountingEncoder(fresh_view())
    second = CachingEmbedder(counting, RedisCache(shared_redis_url, 60, prefix=prefix))
    raw = redis.Redis.from_url(shared_redis_url)
    try:
        a = first.encode(["shared thought", "other"])
        b = second.encode(["shared thought"])
        assert counting.calls == [] and np.array_equal(a[0], b[0])  # served by Redis
        assert second.stats.cache_hits == 1
    finally:
        for key in raw.scan_iter(prefix + "*"):
            raw.delete(key)
        first.close()
        second.close()


def test_redis_outage_never_fails_a_request(redis_server) -> None:
    cache = RedisCache(redis_server.url, ttl_s=60, prefix="outage:", retry_after_s=0.05)
    emb = CachingEmbedder(fresh_view(), cache)
    ref = bundled_encoder()
    try:
        emb.encode(["before the outage"])
        assert emb.stats.redis_errors == 0
        redis_server.stop()
        texts = ["during the outage", "still served"]
        got = emb.encode(texts)  # lookup fails, compute, write-back skipped: still an answer
        np.testing.assert_allclose(got, ref.encode(texts), atol=1e-6)
        assert emb.stats.redis_errors >= 1
        redis_server.start()  # same port: the client reconnects by itself
        time.sleep(0.1)  # past the back-off window
        emb.encode(["after the outage"])
        raw = redis.Redis.from_url(redis_server.url)
        key = "outage:" + cache_key(emb.namespace, "after the outage")
        assert raw.exists(key) == 1  # written again: recovered
        raw.close()
    finally:
        emb.close()
