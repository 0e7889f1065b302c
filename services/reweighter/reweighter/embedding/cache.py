"""Embedding caches: an in-process LRU bounded in bytes, Redis, and the two stacked.

Keys are built by the embedder (cache namespace + sha256 of the text), so a cache never sees
texts. Redis is a cache, never the source of truth: every Redis error is logged (rate-limited),
counted, and answered as a miss or a skipped write, so an outage costs compute, not requests.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np

from reweighter.logs import redact_url

log = logging.getLogger(__name__)

# What one LRU entry costs besides the vector: the key string, the dict slot, the array header.
_ENTRY_OVERHEAD = 200


def cache_key(namespace: str, text: str) -> str:
    return f"{namespace}:{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()}"


class EmbeddingCache:
    """Vectors by key. `blocking` caches do network I/O: async callers run them in a thread."""

    blocking: bool = False

    @property
    def errors(self) -> int:
        """Backend errors so far (each served as a miss)."""
        return 0

    def get_many(self, keys: Sequence[str]) -> list[np.ndarray | None]:
        raise NotImplementedError

    def set_many(self, items: Mapping[str, np.ndarray]) -> None:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class LRUCache(EmbeddingCache):
    """Least-recently-used eviction once the stored bytes exceed `max_bytes`; thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @staticmethod
    def _size(key: str, vec: np.ndarray) -> int:
        return vec.nbytes + len(key) + _ENTRY_OVERHEAD

    def get_many(self, keys: Sequence[str]) -> list[np.ndarray | None]:
        out: list[np.ndarray | None] = []
        with self._lock:
            for key in keys:
                vec = self._items.get(key)
                if vec is not None:
                    self._items.move_to_end(key)
                out.append(vec)
        return out

    def set_many(self, items: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            for key, vec in items.items():
                vec = np.array(vec, dtype=np.float32, copy=True)
                vec.setflags(write=False)  # callers share the stored vector: nobody may mutate it
                size = self._size(key, vec)
                if size > self.max_bytes:
                    continue
                old = self._items.pop(key, None)
                if old is not None:
                    self.nbytes -= self._size(key, old)
                self._items[key] = vec
                self.nbytes += size
                while self.nbytes > self.max_bytes:
                    k, v = self._items.popitem(last=False)
                    self.nbytes -= self._size(k, v)


class RedisCache(EmbeddingCache):
    """Vectors as raw float32 bytes under prefix + key, with a TTL; one MGET / one pipeline.

    After an error the backend is skipped for `retry_after_s` (doubling up to 30 s) so that an
    unreachable Redis does not add a socket timeout to every request; redis-py reconnects by
    itself on the next attempt once the server is back.
    """

    blocking = True

    def __init__(
        self,
        url: str,
        ttl_s: int,
        prefix: str = "reweighter:emb:",
        *,
        # below reweighter.redis_client's default: a miss is served by computing, so a
        # reply later than a quarter second costs the request more than it saves
        socket_timeout_s: float = 0.25,
        retry_after_s: float = 1.0,
    ) -> None:
        from reweighter.redis_client import sync_client

        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.url, self.ttl_s, self.prefix = url, ttl_s, prefix
        self._client = sync_client(url, socket_timeout_s=socket_timeout_s)
        self._retry_after_s = retry_after_s
        self._backoff_s = retry_after_s
        self._skip_until = 0.0
        self._errors = 0
        self._last_log = 0.0
        self._lock = threading.Lock()

    @property
    def errors(self) -> int:
        return self._errors

    def _available(self) -> bool:
        return time.monotonic() >= self._skip_until

    def _ok(self) -> None:
        if self._backoff_s != self._retry_after_s:
            log.info("redis cache at %s is reachable again", redact_url(self.url))
        self._backoff_s = self._retry_after_s

    def _failed(self, op: str, exc: Exception) -> None:
        now = time.monotonic()
        with self._lock:
            self._errors += 1
            self._skip_until = now + self._backoff_s
            self._backoff_s = min(self._backoff_s * 2, 30.0)
            if now - self._last_log >= 10.0:
                self._last_log = now
                log.warning(
                    "redis cache %s failed (%s: %s); serving by computing (errors so far: %d)",
                    op,
                    type(exc).__name__,
                    exc,
                    self._errors,
                )

    def get_many(self, keys: Sequence[str]) -> list[np.ndarray | None]:
        if not keys or not self._available():
            return [None] * len(keys)
        try:
            raw = self._client.mget([self.prefix + k for k in keys])
        except Exception as exc:  # any failure of a cache is a miss
            self._failed("get", exc)
            return [None] * len(keys)
        self._ok()
        out: list[np.ndarray | None] = []
        for blob in raw:
            if blob is None or len(blob) % 4:
                out.append(None)
            else:
                vec = np.frombuffer(blob, dtype=np.float32)
                out.append(vec)
        return out

    def set_many(self, items: Mapping[str, np.ndarray]) -> None:
        if not items or not self._available():
            return
        try:
            pipe = self._client.pipeline(transaction=False)
            for key, vec in items.items():
                pipe.set(
                    self.prefix + key, np.asarray(vec, dtype=np.float32).tobytes(), ex=self.ttl_s
                )
            pipe.execute()
        except Exception as exc:
            self._failed("set", exc)
            return
        self._ok()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a dead connection is no error
            self._client.close()


class TieredCache(EmbeddingCache):
    """The LRU in front of Redis: hot vectors never leave the process; Redis shares the rest."""

    blocking = True

    def __init__(self, front: LRUCache, back: RedisCache) -> None:
        self.front, self.back = front, back

    @property
    def errors(self) -> int:
        return self.back.errors

    def get_many(self, keys: Sequence[str]) -> list[np.ndarray | None]:
        out = self.front.get_many(keys)
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            found = self.back.get_many([keys[i] for i in missing])
            promote = {}
            for i, vec in zip(missing, found, strict=True):
                if vec is not None:
                    out[i] = vec
                    promote[keys[i]] = vec
            if promote:
                self.front.set_many(promote)
        return out

    def set_many(self, items: Mapping[str, np.ndarray]) -> None:
        self.front.set_many(items)
        self.back.set_many(items)

    def close(self) -> None:
        self.back.close()
