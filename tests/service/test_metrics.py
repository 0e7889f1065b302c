"""TEI-style observability on a live service: per-request queue and encode time histograms,
and the batcher's queue depth, on /metrics for both transports."""

from __future__ import annotations

import time
import uuid

import httpx

from reweighter.client import GrpcReweighterClient, ReweighterClient
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest


def _samples(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def _fresh_request() -> ReweightRequest:
    # New texts every run: nothing comes from the cache, so the request is queued and encoded.
    tag = uuid.uuid4().hex
    texts = [f"{tag} path {i}: {i} + {i} = {2 * i}" for i in range(3)]
    return ReweightRequest(groups=[Group([1.0, 0.0, 1.0], texts)])


def test_queue_and_encode_times_are_histograms_per_transport(
    service: BackgroundService, http: ReweighterClient, grpc_client: GrpcReweighterClient
) -> None:
    before = _samples(service.http_url)
    http.reweight(_fresh_request())
    grpc_client.reweight(_fresh_request())
    after = _samples(service.http_url)
    for transport in ("http", "grpc"):
        labels = f'{{endpoint="reweight",transport="{transport}"}}'
        for hist in ("reweighter_encode_duration_seconds", "reweighter_queue_duration_seconds"):
            count = f"{hist}_count{labels}"
            assert after[count] == before.get(count, 0.0) + 1, (count, after.get(count))
            total = f"{hist}_sum{labels}"
            assert after[total] > before.get(total, 0.0)
        encoded = after[f"reweighter_encode_duration_seconds_sum{labels}"]
        queued = after[f"reweighter_queue_duration_seconds_sum{labels}"]
        assert queued <= encoded  # queueing is part of the time in the embedder
    assert after["reweighter_queue_depth"] == 0.0  # idle again once both answered


def test_precomputed_embeddings_record_no_encode_time(
    service: BackgroundService, http: ReweighterClient
) -> None:
    labels = '{endpoint="reweight",transport="http"}'
    name = f"reweighter_encode_duration_seconds_count{labels}"
    before = _samples(service.http_url).get(name, 0.0)
    http.reweight(ReweightRequest(groups=[Group([1.0, 0.5], embeddings=[[1.0, 0.0], [0.6, 0.8]])]))
    assert _samples(service.http_url).get(name, 0.0) == before


def test_encoder_thread_cpu_grows_with_encoding_and_not_without(
    service: BackgroundService, http: ReweighterClient
) -> None:
    """The host path's denominator (bench/bench_host_path.py subtracts this counter from the
    process's CPU): it grows when texts are encoded, stays put for precomputed embeddings, and
    never exceeds the process's own CPU time."""
    name = "reweighter_encoder_thread_cpu_seconds_total"
    before = _samples(service.http_url)[name]
    http.reweight(_fresh_request())
    grown = _samples(service.http_url)[name]
    assert grown > before
    http.reweight(ReweightRequest(groups=[Group([1.0, 0.5], embeddings=[[1.0, 0.0], [0.6, 0.8]])]))
    assert _samples(service.http_url)[name] == grown
    assert grown <= time.process_time()  # the service runs in this process here


def test_the_in_process_caches_report_their_fill(
    service: BackgroundService, http: ReweighterClient
) -> None:
    """reweighter_cache_entries / _bytes (the vector LRU) and reweighter_word_cache_words (the
    tokenizer's word cache): what bench/bench_soak.py reads to tell a cache filling from a
    leak. Three new texts: three more vectors held, their bytes counted, and their words kept
    (words that repeat: a batch of mostly unseen words is tokenised whole, not remembered)."""
    tag = uuid.uuid4().hex
    texts = [f"{tag} {i} " + "we add the digits and carry the one " * 6 for i in range(3)]
    before = _samples(service.http_url)
    http.reweight(ReweightRequest(groups=[Group([1.0, 0.0, 1.0], texts)]))
    after = _samples(service.http_url)
    assert after["reweighter_cache_entries"] == before["reweighter_cache_entries"] + 3
    grown = after["reweighter_cache_bytes"] - before["reweighter_cache_bytes"]
    assert 3 * 384 * 4 <= grown <= 3 * (384 * 4 + 400)  # the vectors, keys and entry overhead
    assert after["reweighter_word_cache_words"] > 0
