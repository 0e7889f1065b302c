"""Items 7 and 8 at unit level: URLs are logged without credentials, repeated lines are
rate-limited (the outside-in checks are in test_redis_outage.py and test_flood.py)."""

from __future__ import annotations

import logging
import time

import pytest

from reweighter import logs


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:pw@host/1", "rediss://user:***@host/1"),
        ("redis://token@host", "redis://***@host"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("http://h/x?password=pw&db=1", "http://h/x?password=%2A%2A%2A&db=1"),
        (None, "None"),
    ],
)
def test_redact_url(url: str | None, want: str) -> None:
    assert logs.redact_url(url) == want


def _capture(*filters: logging.Filter) -> tuple[logging.Logger, list[str]]:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    handler = Keep()
    for f in filters:
        handler.addFilter(f)
    logger = logging.getLogger(f"hardening.{id(seen)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    return logger, seen


def test_credentials_in_any_logged_url_or_traceback_are_masked() -> None:
    logger, seen = _capture(logs.RedactFilter())
    logger.warning("connecting to %s", "redis://:hunter2@10.0.0.1:6379/0")
    try:
        raise ConnectionError("cannot reach amqp://app:hunter2@broker/")
    except ConnectionError:
        logger.exception("backend down")
    assert seen and all("hunter2" not in line for line in seen)
    assert "redis://:***@10.0.0.1:6379/0" in seen[0] and "amqp://app:***@broker/" in seen[1]


def test_repeated_lines_are_rate_limited_and_summarised() -> None:
    limiter = logs.RepeatFilter(window_s=0.2, burst=3)
    logger, seen = _capture(limiter)
    for i in range(1000):
        logger.error("accept failed on fd %d", i)
    logger.info("a different line")
    assert len(seen) == 4
    time.sleep(0.25)
    logger.error("accept failed on fd %d", 0)
    assert "997 similar lines suppressed" in seen[-1]
