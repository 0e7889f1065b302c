"""Redis killed and restarted under load (items 7 and the issue's fault test): every request
is answered, with the same numbers as before the outage, the cache recovers, and the Redis
password never reaches the log."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import RedisServer

from .conftest import AUTH, REDIS_PASSWORD, Served


def _requests(n: int) -> list[dict]:
    tag = uuid.uuid4().hex[:8]
    return [
        {
            "method": "dra",
            "advantages": "grpo",
            "groups": [
                {
                    "rewards": [1, 0, 1],
                    "completions": [f"{tag} {i}: the answer is {i}", f"{tag} {i}: no", "same"],
                }
            ],
        }
        for i in range(n)
    ]


def test_redis_killed_and_restarted_under_load(keyed: Served, private_redis: RedisServer) -> None:
    """Fresh texts in each phase (the in-process cache would otherwise hide Redis); every
    answer is then asked again at the end and must not have changed."""
    answers: list[tuple[dict, dict]] = []
    with httpx.Client(base_url=keyed.url, headers=AUTH, timeout=60) as client:

        def one(body: dict) -> tuple[dict, dict]:
            response = client.post("/v1/reweight", json=body)
            assert response.status_code == 200, response.text
            return body, response.json()

        with ThreadPoolExecutor(4) as pool:
            answers += pool.map(one, _requests(4))  # Redis up
            private_redis.stop()  # outage: requests go on by computing
            answers += pool.map(one, _requests(6))
            private_redis.start()
            deadline = time.monotonic() + 30
            while "reachable again" not in keyed.log() and time.monotonic() < deadline:
                answers += pool.map(one, _requests(2))
                time.sleep(0.3)
            answers += pool.map(one, _requests(4))  # recovered
            again = list(pool.map(one, [body for body, _ in answers]))
    for (_, first), (_, second) in zip(answers, again, strict=True):
        g1, g2 = first["groups"][0], second["groups"][0]
        assert g2["rewards"] == pytest.approx(g1["rewards"], abs=1e-5)
        assert g2["advantages"] == pytest.approx(g1["advantages"], abs=1e-4)
    log = keyed.log()
    assert "redis cache get failed" in log or "redis cache set failed" in log
    assert "reachable again" in log, "the cache never recovered"
    assert REDIS_PASSWORD not in log
