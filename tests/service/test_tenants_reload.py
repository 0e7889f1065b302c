"""Issue 38: the tenants file on a real `reweighter serve --tenants PATH` (as a user runs it).

SIGHUP rotates a key without a restart: the old key then gets 401 and the new one 200 on both
transports, and a request in flight at the reload is answered. A file that does not parse is
refused with the reason in the log, and the old tenants stay. A bad file at start stops serve
with the field named."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import no_retry

from reweighter.client import GrpcReweighterClient, ReweighterClient
from reweighter.errors import Unauthenticated
from reweighter.launch import OFFLINE, serve

pytestmark = pytest.mark.server  # `reweighter serve` as a child process

OLD, NEW, OTHER = "old-key-of-team-a", "new-key-of-team-a", "key-of-team-b-1"


def _write(path: Path, key_a: str) -> None:
    data = {"tenants": [{"name": "team-a", "key": key_a}, {"name": "team-b", "key": OTHER}]}
    path.write_text(json.dumps(data))


def _ok(url: str, target: str, key: str) -> str:
    """The tenant /v1/info names on both transports (they must agree)."""
    with (
        ReweighterClient(url, api_key=key, retry=no_retry()) as http,
        GrpcReweighterClient(target, api_key=key, retry=no_retry()) as grpc_client,
    ):
        a, b = http.info()["tenant"], grpc_client.info()["tenant"]
    assert a == b
    return a


def _refused(url: str, target: str, key: str) -> None:
    with (
        ReweighterClient(url, api_key=key, retry=no_retry()) as http,
        pytest.raises(Unauthenticated),
    ):
        http.info()
    with (
        GrpcReweighterClient(target, api_key=key, retry=no_retry()) as grpc_client,
        pytest.raises(Unauthenticated),
    ):
        grpc_client.info()


def _wait_log(served: object, text: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in served.log():  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{served.log()[-2000:]}"  # type: ignore[attr-defined]
        time.sleep(0.05)


def test_sighup_rotates_a_key_and_a_bad_file_keeps_the_old_tenants(tmp_path: Path) -> None:
    path = tmp_path / "tenants.json"
    _write(path, OLD)
    with serve("--tenants", str(path)) as served:
        url, target = served.url, served.target
        assert _ok(url, target, OLD) == "team-a"
        _refused(url, target, "no-such-key-here")
        texts = [f"in flight {i}: " + "we add the digits and carry " * 12 for i in range(48)]
        with ThreadPoolExecutor(1) as pool:
            client = ReweighterClient(url, api_key=OLD, retry=no_retry())
            in_flight = pool.submit(client.embed, texts)
            time.sleep(0.05)  # sent; the reload happens while it is served
            _write(path, NEW)
            served.proc.send_signal(signal.SIGHUP)
            _wait_log(served, "tenants reloaded")
            answered = in_flight.result(timeout=120)
            client.close()
        assert len(answered.embeddings) == len(texts)  # the request in flight was answered
        _refused(url, target, OLD)
        assert _ok(url, target, NEW) == "team-a"
        assert _ok(url, target, OTHER) == "team-b"
        # a file that does not parse: refused, the reason logged, the old tenants kept
        path.write_text('{"tenants": [{"name": "team-a", "weight": 0, "key": "k')
        served.proc.send_signal(signal.SIGHUP)
        _wait_log(served, "tenants file refused")
        assert _ok(url, target, NEW) == "team-a"
        # one that parses but breaks a rule: the field is named
        path.write_text(json.dumps({"tenants": [{"name": "team-a", "key": NEW, "weight": 0}]}))
        served.proc.send_signal(signal.SIGHUP)
        _wait_log(served, "tenants[0].weight")
        assert _ok(url, target, OTHER) == "team-b"
        assert served.proc.poll() is None


def test_a_bad_tenants_file_stops_serve_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  - name: team-a\n    key: short\n")
    proc = subprocess.run(
        [sys.executable, "-m", "reweighter", "serve", "--tenants", str(path), "--http-port", "0",
         "--grpc-port", "0"],
        capture_output=True, text=True, timeout=120, env={**_env(), **OFFLINE},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "tenants[0].key" in proc.stderr


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
