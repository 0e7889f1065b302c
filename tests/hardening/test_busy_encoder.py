"""Items 1 and 6: a max-size request must not hold the encoder against everyone else, and
SIGTERM must end the process within its grace even while the encoder is busy.

The shared service has a small `max_chars`, so that "max-size" means seconds of encoding here,
not minutes. Ordering and completion are asserted, not wall-clock thresholds: the latency a small
request sees beside the big one is measured in the report, not here."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest
from conftest import RedisServer
from prometheus_client.parser import text_string_to_metric_families

from .conftest import AUTH, KEYED_GRACE_S, KEYED_MAX_CHARS, Served, error_shape, start_keyed

MAX_CHARS = KEYED_MAX_CHARS
GRACE_S = KEYED_GRACE_S
_WORDS = ["first", "we", "compute", "the", "product", "then", "carry", "digit", "so", "sum"]


def words(n_chars: int, seed: int) -> str:
    """Reasoning-like text of about n_chars characters, different for each seed."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_chars - 12:
        parts.append(f"{rng.choice(_WORDS)}{rng.randint(0, 999)}")
        size += len(parts[-1]) + 1
    return " ".join(parts)


def big_request(seed: int) -> dict:
    """The largest request the service allows: one long completion beside a short one."""
    return {"groups": [{"rewards": [1, 0], "completions": [words(MAX_CHARS - 50, seed), "ok"]}]}


def small_request(seed: int) -> dict:
    return {
        "groups": [{"rewards": [1, 0, 1], "completions": [words(200, seed + i) for i in range(3)]}]
    }


def _metric(served: Served, name: str, **labels: str) -> float:
    text = httpx.get(served.url + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def _post(served: Served, body: dict, timeout: float = 600) -> tuple[httpx.Response, float]:
    response = httpx.post(served.url + "/v1/reweight", json=body, headers=AUTH, timeout=timeout)
    return response, time.monotonic()


def _wait_encoding(served: Served, big: Future, batches_before: float) -> None:
    """Until the big request is in flight and the encoder has started on it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not big.done():
        if _metric(served, "reweighter_batches_total") > batches_before:
            return
        time.sleep(0.05)
    raise AssertionError("the big request never reached the encoder")


def test_small_requests_finish_while_a_max_size_request_encodes(keyed: Served) -> None:
    busy = keyed
    with ThreadPoolExecutor(8) as pool:
        before = _metric(busy, "reweighter_batches_total")
        started = time.monotonic()
        big = pool.submit(_post, busy, big_request(seed=1))
        _wait_encoding(busy, big, before)
        sent = time.monotonic()
        small = [pool.submit(_post, busy, small_request(seed=100 + 10 * i)) for i in range(3)]
        done = [f.result(timeout=300) for f in small]
        big_in_flight = not big.done()
        waited = [round(t - sent, 2) for _, t in done]
        print(f"small requests beside a {MAX_CHARS}-char request answered after {waited} s")
        assert all(r.status_code == 200 for r, _ in done), [r.text for r, _ in done]
        response, finished = big.result(timeout=600)  # the encoder is idle again after
        assert response.status_code == 200, response.text
        if not big_in_flight:
            pytest.fail(
                f"the small requests waited for the big one ({finished - started:.1f} s of "
                f"encoding; the small ones {waited} s): head-of-line blocking"
            )


@pytest.fixture
def busy(private_redis: RedisServer) -> Iterator[Served]:
    """A service of this test's own, with the shared one's settings: the test stops it."""
    with start_keyed(private_redis) as served:
        yield served


def test_sigterm_with_the_encoder_busy_exits_within_grace(busy: Served) -> None:
    with ThreadPoolExecutor(8) as pool:
        before = _metric(busy, "reweighter_batches_total")
        big = pool.submit(_post, busy, big_request(seed=2), 120)
        _wait_encoding(busy, big, before)
        small = [pool.submit(_post, busy, small_request(seed=200 + 10 * i), 120) for i in range(2)]
        deadline = time.monotonic() + 30  # all three in the server's hands before the signal
        while _metric(busy, "reweighter_requests_in_flight", transport="http") < 3:
            assert time.monotonic() < deadline, "the requests never reached the server"
            time.sleep(0.05)
        sent = time.monotonic()
        busy.proc.send_signal(signal.SIGTERM)
        try:
            busy.proc.wait(GRACE_S + 8)
        except subprocess.TimeoutExpired:
            busy.proc.kill()
            pytest.fail(f"still running {GRACE_S + 8:.0f} s after SIGTERM (grace {GRACE_S} s)")
        exit_s = time.monotonic() - sent
        print(f"exit {exit_s:.1f} s after SIGTERM (grace {GRACE_S} s)")
        assert busy.proc.returncode == 0
        for f in [big, *small]:
            # each in-flight request is answered, or refused in the documented shape
            try:
                response, _ = f.result(timeout=10)
            except httpx.TransportError as e:
                pytest.fail(f"an in-flight request was cut off without an answer: {e!r}")
            assert response.status_code in (200, 503), response.text
            if response.status_code == 503:
                assert error_shape(response.json())["type"] in ("NotReady", "ShuttingDown")
