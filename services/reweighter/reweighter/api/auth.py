"""API-key check shared by both transports: a bearer token, compared in constant time.

HTTP sends it as `Authorization: Bearer <key>`, gRPC as `authorization` metadata with the same
value. Health, readiness and metrics stay open so orchestrators and scrapers need no secret;
they carry no request content.
"""

from __future__ import annotations

import hmac

from ..errors import Unauthenticated

OPEN_HTTP_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"})


def check_bearer(header: str | None, api_key: str | None) -> None:
    """Raise Unauthenticated unless `header` is "Bearer <api_key>" (no key configured: open)."""
    if not api_key:
        return
    if not header:
        raise Unauthenticated("missing API key: send 'authorization: Bearer <key>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        token.strip().encode(), api_key.encode()
    ):
        raise Unauthenticated("wrong API key")
