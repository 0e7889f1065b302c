"""Real services on loopback: uvicorn + grpc.aio on one event loop in a background thread.

The model loads once per session (`engine`, in tests/conftest.py with `loopback`, `service` and
`http`); services built over it are cheap, so modules start their own with the settings they
need (API key, small limits) and stop them at module end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import loopback, no_retry

from reweighter.client import GrpcReweighterClient
from reweighter.service import BackgroundService

NO_RETRY = no_retry()
__all__ = ["NO_RETRY", "loopback"]  # for the tests


@pytest.fixture(scope="module")
def grpc_client(service: BackgroundService) -> Iterator[GrpcReweighterClient]:
    with GrpcReweighterClient(service.grpc_target, retry=NO_RETRY) as client:
        yield client
