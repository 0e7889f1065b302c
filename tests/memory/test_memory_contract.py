"""The answer memory's contract (reweighter.memory), one suite run against every store in the
same run: in process, and Redis (the machine's at 127.0.0.1:6379 with a unique key prefix, or
a private redis-server). Plus what only Redis can show: two replicas sharing it, a restart
keeping the memory, an outage that fails loudly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reweighter.errors import MemoryUnavailable
from reweighter.memory import InProcessMemory
from reweighter.memory.redis_store import RedisMemory


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _redis(url: str, **kw: Any) -> RedisMemory:
    opts = {"ttl_s": 3600, "max_keys": 100, "prefix": f"test:mem:{uuid.uuid4().hex}:"}
    opts.update(kw)
    return RedisMemory(url, **opts)


@pytest.fixture(params=["inprocess", "redis"])
def make(request: pytest.FixtureRequest, shared_redis_url: str) -> Iterator[Any]:
    """A factory of stores of one kind (same kind, same shared state where the kind has one)."""
    made: list[Any] = []
    prefix = f"test:mem:{uuid.uuid4().hex}:"

    def build(max_keys: int = 100) -> Any:
        if request.param == "inprocess":
            m: Any = InProcessMemory(3600, max_keys)
        else:
            m = _redis(shared_redis_url, max_keys=max_keys, prefix=prefix)
        made.append(m)
        return m

    yield build
    for m in made:
        m.close()


def test_counts_come_from_earlier_steps_only(make: Any) -> None:
    m = make()
    assert m.observe_many([("p", 1, ["4", "4", "5"])]) == [{"4": 0, "5": 0}]
    # Step 2 sees step 1's answers; its own are not counted in its own answer.
    assert m.observe_many([("p", 2, ["4", "7"])]) == [{"4": 2, "7": 0}]
    assert m.observe_many([("p", 3, ["4", "5", "7"])]) == [{"4": 3, "5": 1, "7": 1}]


def test_a_retry_counts_once_and_gets_the_identical_answer(make: Any) -> None:
    m = make()
    m.observe_many([("p", 1, ["a", "a"])])
    first = m.observe_many([("p", 2, ["a", "b"])])
    again = m.observe_many([("p", 2, ["a", "b"])])
    assert first == again == [{"a": 2, "b": 0}]
    # Step 2 was recorded once: step 3 sees a three times (2 + 1), b once.
    assert m.observe_many([("p", 3, ["a", "b"])]) == [{"a": 3, "b": 1}]


def test_two_prompt_keys_never_mix(make: Any) -> None:
    m = make()
    m.observe_many([("p", 1, ["x"]), ("q", 1, ["y", "y"])])
    assert m.observe_many([("p", 2, ["x", "y"]), ("q", 2, ["x", "y"])]) == [
        {"x": 1, "y": 0},
        {"x": 0, "y": 2},
    ]
    assert m.size() == 2


def test_the_number_of_prompt_keys_is_bounded(make: Any) -> None:
    m = make(max_keys=2)
    m.observe_many([("a", 1, ["1"])])
    m.observe_many([("b", 1, ["1"])])
    m.observe_many([("c", 1, ["1"])])  # a, the least recently written, goes
    assert m.size() == 2
    assert m.observe_many([("a", 2, ["1"])]) == [{"1": 0}]  # forgotten: counts restart
    assert m.observe_many([("c", 2, ["1"])]) == [{"1": 1}]


def test_two_replicas_share_one_store(make: Any, request: pytest.FixtureRequest) -> None:
    if request.node.callspec.params["make"] == "inprocess":
        pytest.skip("an in-process store is one replica's own by design")
    one, two = make(), make()
    one.observe_many([("p", 1, ["a"])])
    # The same (key, step) through the other replica is a retry: counted once.
    assert two.observe_many([("p", 1, ["a"])]) == [{"a": 0}]
    assert two.observe_many([("p", 2, ["a"])]) == [{"a": 1}]
    assert one.observe_many([("p", 3, ["a"])]) == [{"a": 2}]


def test_in_process_ttl_forgets_an_idle_key() -> None:
    clock = Clock()
    m = InProcessMemory(ttl_s=10, max_keys=10, clock=clock)
    m.observe_many([("p", 1, ["a"])])
    clock.now += 5
    m.observe_many([("q", 1, ["a"])])
    clock.now += 6  # p idle 11 s > 10, q 6 s
    assert m.size() == 1
    assert m.observe_many([("p", 2, ["a"])]) == [{"a": 0}]


def test_redis_sets_the_ttl(shared_redis_url: str) -> None:
    import redis

    m = _redis(shared_redis_url, ttl_s=50)
    m.observe_many([("p", 1, ["a"])])
    r = redis.Redis.from_url(shared_redis_url)
    keys = list(r.scan_iter(match=m.prefix + "k:*"))
    assert len(keys) == 1 and 0 < r.ttl(keys[0]) <= 50
    r.delete(*keys, m.prefix + "index")
    r.close()
    m.close()


def test_redis_memory_survives_a_restart_and_fails_loudly_when_down(redis_server: Any) -> None:
    """A new store object (a restarted service) reads what the old one wrote; while Redis is
    down observe raises MemoryUnavailable (never counts from nothing) and errors are counted."""
    m = _redis(redis_server.url)
    m.observe_many([("p", 1, ["a", "a"])])
    m.close()
    m = _redis(redis_server.url, prefix=m.prefix)  # the restarted service
    assert m.observe_many([("p", 2, ["a"])]) == [{"a": 2}]
    redis_server.stop()
    with pytest.raises(MemoryUnavailable) as e:
        m.observe_many([("p", 3, ["a"])])
    assert e.value.field == "memory" and e.value.http_status == 503
    assert m.errors == 1
    assert m.size() == -1
    redis_server.start()
    # Back: it answers again. This private Redis persists nothing, so it lost its data (a
    # deployment's Redis keeps it: docs/operations.md); counts restart, they are never guessed.
    assert m.observe_many([("p", 3, ["a"])]) == [{"a": 0}]
    m.close()
