"""CachingEmbedder: dedupe, cache hits, stats, input errors, build_embedder (real model)."""

from __future__ import annotations

import numpy as np
import pytest

from reweighter.config import Settings
from reweighter.embedding import CachingEmbedder, LRUCache, TieredCache, build_embedder
from reweighter.errors import InvalidInput

from .support import CountingEncoder, bundled_encoder, fresh_view


def test_identical_texts_reach_the_model_once() -> None:
    counting = CountingEncoder(fresh_view())
    emb = CachingEmbedder(counting, cache=None)
    out = emb.encode(["x is 3", "y is 4", "x is 3", "x is 3"])
    assert counting.calls == [["x is 3", "y is 4"]]
    assert np.array_equal(out[0], out[2]) and np.array_equal(out[0], out[3])
    assert not np.allclose(out[0], out[1])
    np.testing.assert_allclose(out[:2], bundled_encoder().encode(["x is 3", "y is 4"]), atol=1e-6)
    assert emb.stats.dedupe_saved == 2 and emb.stats.texts_encoded == 2
    assert emb.stats.batches == 1 and emb.stats.batch_sizes == [2]


def test_cache_hits_skip_the_model() -> None:
    counting = CountingEncoder(fresh_view())
    emb = CachingEmbedder(counting, cache=LRUCache(1 << 20))
    first = emb.encode(["alpha", "beta"])
    second = emb.encode(["beta", "alpha", "gamma"])
    assert counting.calls == [["alpha", "beta"], ["gamma"]]
    assert np.array_equal(second[0], first[1]) and np.array_equal(second[1], first[0])
    assert (emb.stats.cache_hits, emb.stats.cache_misses) == (2, 3)


def test_without_a_cache_every_call_computes() -> None:
    counting = CountingEncoder(fresh_view())
    emb = CachingEmbedder(counting, cache=None)
    emb.encode(["same"])
    emb.encode(["same"])
    assert counting.calls == [["same"], ["same"]]


def test_batch_limits_reach_the_encoder() -> None:
    view = fresh_view()
    emb = CachingEmbedder(view, max_batch_tokens=100_000, max_batch_size=2)
    emb.encode([f"text number {i}" for i in range(5)])
    assert emb.stats.batch_sizes == [2, 2, 1] and emb.stats.batches == 3


def test_bad_input_names_the_field() -> None:
    emb = CachingEmbedder(fresh_view())
    with pytest.raises(InvalidInput) as e:
        emb.encode("a single string")
    assert e.value.field == "texts"
    with pytest.raises(InvalidInput) as e:
        emb.encode(["fine", 3])  # type: ignore[list-item]
    assert e.value.field == "texts[1]"
    assert emb.encode([]).shape == (0, 384)


async def test_aencode_equals_encode() -> None:
    emb = CachingEmbedder(fresh_view())
    texts = ["one plus one is two", "two times three is six", "one plus one is two"]
    try:
        got = await emb.aencode(texts)
    finally:
        await emb.aclose()
    np.testing.assert_allclose(got, bundled_encoder().encode(texts), atol=1e-6)
    assert emb.stats.dedupe_saved == 1


def test_build_embedder_from_settings(shared_redis_url: str) -> None:
    emb = build_embedder(Settings(device="cpu", long_text="tail", cache_max_bytes=1 << 20))
    try:
        assert isinstance(emb, CachingEmbedder) and isinstance(emb.cache, LRUCache)
        assert emb.model_id == "sentence-transformers/all-MiniLM-L6-v2" and emb.dim == 384
        assert emb.namespace.endswith("|tail|256")
        assert emb.encoder.max_batch_tokens == 2048  # the CPU default: not set explicitly
        assert emb.encoder.stage.word_ids is not None  # words remembered by default
    finally:
        emb.close()
    off = build_embedder(Settings(device="cpu", word_cache=0))  # REWEIGHTER_WORD_CACHE=0
    try:
        assert off.encoder.stage.word_ids is None
    finally:
        off.close()
    s = Settings(device="cpu", redis_url=shared_redis_url, max_batch_tokens=4096)
    emb = build_embedder(s)
    try:
        assert isinstance(emb.cache, TieredCache)
        assert emb.encoder.max_batch_tokens == 4096
        np.testing.assert_allclose(
            emb.encode(["hello"]), bundled_encoder().encode(["hello"]), atol=1e-6
        )
    finally:
        emb.close()
    assert build_embedder(Settings(device="cpu", cache_max_bytes=0)).cache is None


def test_compile_mode_defaults_to_auto_and_reads_the_old_boolean(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reweighter.embedding import compile_mode

    monkeypatch.delenv("REWEIGHTER_COMPILE", raising=False)
    assert compile_mode(Settings()) == "auto"
    for value, mode in [("1", "on"), ("true", "on"), ("0", "off"), ("off", "off")]:
        monkeypatch.setenv("REWEIGHTER_COMPILE", value)
        assert compile_mode(Settings()) == mode
    with pytest.raises(ValueError, match="compile"):
        Settings(compile="sometimes")
    monkeypatch.delenv("REWEIGHTER_COMPILE")
    assert Settings(slice_tokens=512).slice_tokens == 512


def test_slice_tokens_reach_the_batcher() -> None:
    emb = build_embedder(Settings(device="cpu", compile="off", slice_tokens=300))
    try:
        assert emb.batcher.slice_tokens == 300 and emb.batcher.round_tokens == 1200
    finally:
        emb.close()
    emb = build_embedder(Settings(device="cpu", compile="off"))
    try:
        assert emb.batcher.slice_tokens == 512  # the CPU default
        assert emb.encoder.compile_state == "off"
    finally:
        emb.close()
