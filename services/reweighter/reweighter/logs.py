"""Log hygiene for the service: no credentials in a log line, no log floods.

`redact_url` is for code that logs a URL on purpose (a Redis address). `install` puts two
filters on the process's handlers as a safety net for everything else (a library's exception
text, uvicorn, asyncio): credentials in any URL are masked, and a line repeated many times a
second (an accept() loop out of descriptors, a dead backend) is let through a few times per
window and then summarised, so a flood cannot fill the disk or hide the first error.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_MASK = "***"
_SECRET_KEYS = re.compile(r"pass|secret|token|key|auth", re.I)
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s/]+)@")
# the OpenRLHF route's secret path segment (api/http/openrlhf.py): /v1/openrlhf/<token>/reward
_PATH_SECRET = re.compile(r"(/v1/openrlhf/)[^/?#\s\"']+(?=/reward)")


def redact_url(url: str | None) -> str:
    """The URL with its password (and secret-looking query values) replaced by ***."""
    if not url:
        return str(url)
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{_MASK}@{host}" if ":" in userinfo or not user else f"{_MASK}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode([(k, _MASK if _SECRET_KEYS.search(k) else v) for k, v in pairs])
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<unparseable url>"


def redact_text(text: str) -> str:
    """Mask the password of every scheme://user:password@ in free text, and the secret
    segment of OpenRLHF's token route."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{_MASK}@", text)
    return _PATH_SECRET.sub(rf"\g<1>{_MASK}", text)


class RedactFilter(logging.Filter):
    """Rewrites a record whose message or traceback carries URL credentials."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            # argument by argument: uvicorn's access formatter unpacks the tuple (path 3rd)
            record.args = tuple(redact_text(a) if isinstance(a, str) else a for a in record.args)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the logging module's business
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            trace = logging.Formatter().formatException(record.exc_info)
            if redact_text(trace) != trace:
                record.msg = f"{clean}\n{redact_text(trace)}"
                record.args, record.exc_info, record.exc_text = None, None, None
        return True


class RepeatFilter(logging.Filter):
    """Lets at most `burst` records with the same origin through per `window_s` seconds.

    The origin is (logger, level, unformatted message, exception type), so a message with a
    changing number in it still counts as one line. When the window turns, one note says how
    many were dropped.
    """

    def __init__(self, window_s: float = 10.0, burst: int = 5, max_keys: int = 1024) -> None:
        super().__init__()
        self.window_s, self.burst, self.max_keys = window_s, burst, max_keys
        self._seen: dict[tuple, list[float]] = {}  # key -> [window start, count]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        key = (record.name, record.levelno, str(record.msg), exc)
        now = time.monotonic()
        with self._lock:
            entry = self._seen.get(key)
            if entry is None or now - entry[0] >= self.window_s:
                dropped = int(entry[1]) - self.burst if entry is not None else 0
                if len(self._seen) >= self.max_keys:
                    self._seen.clear()
                self._seen[key] = [now, 1]
                if dropped > 0:
                    record.msg = f"{record.msg} [{dropped} similar lines suppressed]"
                return True
            entry[1] += 1
            return entry[1] <= self.burst


def install(window_s: float = 10.0, burst: int = 5) -> None:
    """Put the redacting and rate-limiting filters on every handler of the root and uvicorn
    loggers (call after logging is configured). Idempotent."""
    loggers = [logging.getLogger(n) for n in ("", "uvicorn", "uvicorn.error", "uvicorn.access")]
    for logger in loggers:
        for handler in logger.handlers:
            if not any(isinstance(f, RedactFilter) for f in handler.filters):
                handler.addFilter(RedactFilter())
                handler.addFilter(RepeatFilter(window_s, burst))
