"""Starting and stopping: ports open before the model loads, readiness follows the model,
SIGTERM lets in-flight requests finish, flags override the environment."""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from reweighter.client import GrpcReweighterClient, RetryPolicy, ReweighterClient
from reweighter.config import Settings
from reweighter.engine import ReweightEngine
from reweighter.errors import NotReady
from reweighter.launch import serve
from reweighter.server import BackgroundService, configure_parser, settings_from_args
from reweighter.types import Group, ReweightRequest

from .conftest import NO_RETRY, loopback

TEXTS = ["a first answer", "a second answer"]
VECTORS = Group([1.0, 0.0], embeddings=[[1.0, 0.0], [0.0, 1.0]])


class GatedEngine(ReweightEngine):
    """The real engine whose model load waits for the test to open a gate."""

    def __init__(self, settings: Settings, gate: threading.Event) -> None:
        super().__init__(settings)
        self.gate = gate

    def load(self) -> None:
        assert self.gate.wait(60)
        super().load()


def _health(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="reweighter.v1.Reweighter"), timeout=10
        )
    return reply.status


def test_serves_before_the_model_is_loaded_and_ready_after() -> None:
    gate = threading.Event()
    settings = loopback()
    with BackgroundService(settings, GatedEngine(settings, gate)) as svc:
        url = svc.http_url
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert httpx.get(f"{url}/readyz").status_code == 503
        assert _health(svc.grpc_target) == health_pb2.HealthCheckResponse.NOT_SERVING

        texts = ReweightRequest(groups=[Group([1.0, 0.0], TEXTS)])
        response = httpx.post(
            f"{url}/v1/reweight", json={"groups": [{"rewards": [1, 0], "completions": TEXTS}]}
        )
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json()["error"]["type"] == "NotReady"
        with GrpcReweighterClient(svc.grpc_target, retry=NO_RETRY) as rpc:
            with pytest.raises(NotReady):
                rpc.reweight(texts)
            # embeddings need no model; bad input is still a 4xx while loading
            assert rpc.reweight(ReweightRequest(groups=[VECTORS])).model is None
        bad = httpx.post(f"{url}/v1/reweight", json={"method": "x", "groups": []})
        assert bad.status_code == 422

        # a retrying client rides out the loading phase
        patient = RetryPolicy(retries=60, backoff=0.05, max_backoff=0.5)
        with ThreadPoolExecutor(1) as pool, ReweighterClient(url, retry=patient) as client:
            pending = pool.submit(client.reweight, texts)
            time.sleep(0.3)
            assert not pending.done()
            gate.set()
            result = pending.result(timeout=120)
        assert len(result.groups[0].rewards) == 2 and result.model is not None
        assert httpx.get(f"{url}/readyz").status_code == 200
        deadline = time.monotonic() + 30
        while _health(svc.grpc_target) != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def _in_flight(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("reweighter_requests_in_flight{"):
            transport = line.split('transport="')[1].split('"')[0]
            out[transport] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.server
def test_sigterm_lets_in_flight_requests_finish(engine: ReweightEngine) -> None:
    with serve() as served:
        url, proc = served.url, served.proc
        # requests heavy enough (fresh ~170-token texts) to still be running at SIGTERM; the
        # same texts with different rewards and methods, so the in-process check embeds once
        words = "step by step we add the numbers and carry the digits to the next column"
        texts = [f"shutdown {j}: " + words * 10 for j in range(16)]
        requests = [
            ReweightRequest(groups=[Group([float(j % 2) for j in range(16)], texts)], method=m,
                            advantages="grpo")
            for m in ("dra", "mmr")
        ]  # fmt: skip
        with ThreadPoolExecutor(2) as pool:
            http_call = pool.submit(ReweighterClient(url, retry=NO_RETRY).reweight, requests[0])
            grpc_call = pool.submit(
                GrpcReweighterClient(served.target, retry=NO_RETRY).reweight,
                requests[1],
            )
            deadline = time.monotonic() + 60
            while _in_flight(url) != {"http": 1.0, "grpc": 1.0}:
                assert not (http_call.done() and grpc_call.done()), "finished before SIGTERM"
                assert time.monotonic() < deadline
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            results = [http_call.result(timeout=120), grpc_call.result(timeout=120)]
        assert proc.wait(timeout=60) == 0
        for request, result in zip(requests, results, strict=True):
            want = engine.reweight(request).groups[0]
            assert result.groups[0].rewards == pytest.approx(want.rewards, abs=1e-4)
            assert result.groups[0].advantages == pytest.approx(want.advantages, abs=1e-3)


def _one_shot_upstream(listener: socket.socket, closed: threading.Event) -> None:
    """An OpenRLHF-protocol reward server for one request on one kept-alive connection; sets
    `closed` when the caller closes that connection."""
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(60)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        assert length is not None
        while len(body) < int(length.group(1)):
            body += conn.recv(65536)
        reply = b'{"rewards": [1.0]}'
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(reply), reply))  # fmt: skip
        with contextlib.suppress(OSError):
            if conn.recv(1) == b"":
                closed.set()


def test_stop_closes_the_openrlhf_upstream_connection(engine: ReweightEngine) -> None:
    """uvicorn runs without its lifespan (the Service stops both transports), so the Service
    runs the app's shutdown itself: the OpenRLHF route's pooled connection to its upstream reward
    server is closed by a graceful stop, not left open until the process exits."""
    closed = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        threading.Thread(target=_one_shot_upstream, args=(listener, closed), daemon=True).start()
        settings = loopback(openrlhf_upstream_url=f"http://127.0.0.1:{port}/score", openrlhf_n=1)
        svc = BackgroundService(settings, engine).start()
        try:
            body = {"query": ["q"], "prompts": ["p"], "labels": ["l"]}
            r = httpx.post(f"{svc.http_url}/v1/openrlhf/reward", json=body, timeout=30)
            assert r.status_code == 200 and r.json()["rewards"] == [1.0], r.text
            assert not closed.wait(0.5)  # pooled while the service runs
        finally:
            svc.stop()
        assert closed.wait(10), "the upstream connection outlived the service's stop"


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWEIGHTER_HTTP_PORT", "9000")
    monkeypatch.setenv("REWEIGHTER_MAX_CHARS", "1234")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    parser = configure_parser(argparse.ArgumentParser())
    args = parser.parse_args(
        ["--http-port", "9100", "--long-text", "tail", "--api-key", "k", "--max-groups", "7"]
    )
    s = settings_from_args(args)
    assert (s.http_port, s.long_text, s.api_key, s.max_groups) == (9100, "tail", "k", 7)
    assert s.max_chars == 1234 and s.redis_url == "redis://127.0.0.1:1/0"  # from the env
    assert s.grpc_port == 50051  # the default
    assert settings_from_args(parser.parse_args(["--redis-url", "redis://h:2/0"])).redis_url == (
        "redis://h:2/0"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--long-text", "middle"])


@pytest.mark.parametrize(
    ("flags", "want"),
    [([], "auto"), (["--compile"], "on"), (["--compile", "off"], "off"), (["--no-compile"], "off")],
)
def test_compile_is_a_flag(monkeypatch: pytest.MonkeyPatch, flags: list[str], want: str) -> None:
    monkeypatch.delenv("REWEIGHTER_COMPILE", raising=False)
    parser = configure_parser(argparse.ArgumentParser())
    assert settings_from_args(parser.parse_args(flags)).compile == want
    with pytest.raises(SystemExit):
        parser.parse_args(["--compile", "maybe"])


def test_every_setting_is_a_flag_and_help_has_no_stale_figures() -> None:
    from reweighter import cli
    from reweighter.config import Settings

    parser = configure_parser(argparse.ArgumentParser())
    flags = {a.dest for a in parser._actions}
    assert set(Settings.model_fields) <= flags
    # Defaults in the help come from the fields themselves. A setting whose default is decided
    # at run time (per device) must not quote figures in its description: they go stale.
    for name, field in Settings.model_fields.items():
        if field.default is None:
            assert not re.search(r"\d{3,}", field.description or ""), (name, field.description)
    assert "default unset" in parser.format_help()
    # The offline command takes the model settings, generated the same way.
    args = cli.build_parser().parse_args(
        ["reweight", "in.jsonl", "out.jsonl", "--long-text", "tail", "--no-compile"]
    )
    s = settings_from_args(args)
    assert (s.long_text, s.compile) == ("tail", "off")


def test_cli_serve_subcommand_is_wired() -> None:
    from reweighter import cli, server

    args = cli.build_parser().parse_args(["serve", "--http-port", "1", "--grpc-port", "2"])
    assert args.func is server.main and (args.http_port, args.grpc_port) == (1, 2)
