"""Embedding: encoders, the long-text policies, dedupe, caches and dynamic batching."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reweighter.embedding.base import Embedder, EmbedStats, Encoder
from reweighter.embedding.batcher import DynamicBatcher
from reweighter.embedding.cache import EmbeddingCache, LRUCache, RedisCache, TieredCache
from reweighter.embedding.embedder import CachingEmbedder

if TYPE_CHECKING:
    from reweighter.config import Settings

__all__ = [
    "CachingEmbedder",
    "DynamicBatcher",
    "EmbedStats",
    "Embedder",
    "EmbeddingCache",
    "Encoder",
    "LRUCache",
    "RedisCache",
    "TieredCache",
    "build_cache",
    "compile_mode",
    "build_embedder",
]


def build_cache(settings: Settings) -> EmbeddingCache | None:
    """LRU (cache_max_bytes > 0) in front of Redis (cache_redis_url, else redis_url); either
    alone; or none."""
    lru = LRUCache(settings.cache_max_bytes) if settings.cache_max_bytes > 0 else None
    url = settings.embedding_cache_url
    if not url:
        return lru
    redis = RedisCache(url, settings.cache_ttl_s)
    return TieredCache(lru, redis) if lru is not None else redis


def compile_mode(settings: Settings) -> str:
    """`Settings.compile` (flag --compile, env REWEIGHTER_COMPILE): auto | on | off.

    `auto` (the default): on a GPU and on CPUs with AVX-512 (fp32), serve the eager model at
    once and swap the torch.compile'd one in when its background compile is warm, so nobody
    has to know about compiling to get its speed; on AVX2-only CPUs, eager (the compiled
    forward measured slower there). `on` compiles before the service is ready, on any device;
    `off` stays eager.
    """
    return str(settings.compile)


def build_embedder(settings: Settings) -> Embedder:
    """Loads the model named by the settings (the bundled MiniLM by default) behind its cache.

    Batch limits the operator did not set explicitly are left to the encoder, which picks them
    for its device (small token budgets on CPU, large on GPU).
    """
    from reweighter.embedding.backends import BackendSettings
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder
    from reweighter.embedding.tokenizer import TokenizerSettings

    explicit = settings.model_fields_set
    encoder = SentenceTransformerEncoder.build(
        BackendSettings(
            model=settings.model,
            device=settings.device,
            precision=settings.precision,  # type: ignore[arg-type]
            compile=compile_mode(settings),  # type: ignore[arg-type]
            precision_cache_dir=settings.precision_cache_dir,
            compile_cache_dir=settings.compile_cache_dir,
        ),
        TokenizerSettings(
            long_text=settings.long_text,
            long_text_windows=settings.long_text_windows,
            max_seq_length=settings.max_seq_length,
            word_cache=settings.word_cache,
        ),
    )
    return CachingEmbedder(
        encoder,
        build_cache(settings),
        max_batch_tokens=settings.max_batch_tokens if "max_batch_tokens" in explicit else None,
        max_batch_size=settings.max_batch_size if "max_batch_size" in explicit else None,
        max_queue=settings.max_queue,
        slice_tokens=settings.slice_tokens,
    )
