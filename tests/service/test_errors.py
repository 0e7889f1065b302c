"""Every error on both transports: the status code, the field it names, the same message.

Requests go over the raw wire (httpx JSON, the generated gRPC stub) so the status codes are
checked as a client in another language would see them; the Python clients' error classes are
checked separately.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from reweighter.client import GrpcReweighterClient, RetryPolicy, ReweighterClient
from reweighter.engine import ReweightEngine
from reweighter.errors import InvalidInput, LimitExceeded, Unauthenticated
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2 as pb
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2_grpc as pb_grpc
from reweighter.wire.grpc import to_proto
from reweighter.wire.http import body

from .conftest import NO_RETRY, loopback

NAN, INF = math.nan, math.inf
TXT = ["first answer", "second answer"]

INVALID = {
    "wrong lengths": (Group([1.0, 0.0, 1.0], TXT), {}, "groups[0].completions"),
    "NaN reward": (Group([1.0, NAN], TXT), {}, "groups[0].rewards[1]"),
    "infinite reward": (Group([-INF, 1.0], TXT), {}, "groups[0].rewards[0]"),
    "inf in embeddings": (
        Group([1.0, 0.0], embeddings=[[1, 0], [INF, 0]]),
        {},
        "groups[0].embeddings[1]",
    ),
    "embeddings count": (Group([1.0, 0.0], embeddings=[[1.0, 0.0]]), {}, "groups[0].embeddings"),
    "empty group": (Group([], []), {}, "groups[0].rewards"),
    "both inputs": (Group([1.0, 0.0], TXT, embeddings=[[1, 0], [0, 1]]), {}, "groups[0]"),
    "neither input": (Group([1.0, 0.0]), {}, "groups[0]"),
    "unknown method": (Group([1.0, 0.0], TXT), {"method": "bogus"}, "method"),
    "param of another method": (
        Group([1.0, 0.0], TXT),
        {"method": "dra", "params": {"lambda": 0.5}},
        "params.lambda",
    ),
    "dra param on mmr": (
        Group([1.0, 0.0], TXT),
        {"method": "mmr", "params": {"similarity_floor": 0.1}},
        "params.similarity_floor",
    ),
    "lambda out of range": (
        Group([1.0, 0.0], TXT),
        {"method": "mmr", "params": {"lambda": 2.0}},
        "params.lambda",
    ),
    "unknown advantages": (Group([1.0, 0.0], TXT), {"advantages": "ppo"}, "advantages"),
}


def _request(group: Group | None, extra: dict) -> ReweightRequest:
    return ReweightRequest(groups=[group] if group else [], **extra)


def _http_json(request: ReweightRequest) -> bytes:
    import json

    return json.dumps(body(request), allow_nan=True).encode()


def _post(url: str, content: bytes, **headers: str) -> httpx.Response:
    headers = {"content-type": "application/json", **headers}
    return httpx.post(f"{url}/v1/reweight", content=content, headers=headers)


def _grpc_error(target: str, msg: pb.ReweightRequest, metadata=()) -> grpc.RpcError:
    with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError) as info:
        pb_grpc.ReweighterStub(channel).Reweight(msg, timeout=30, metadata=metadata)
    return info.value


def _trailing(err: grpc.RpcError) -> dict[str, str]:
    return dict(err.trailing_metadata() or ())


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_input_on_both_transports(case: str, service: BackgroundService) -> None:
    group, extra, field = INVALID[case]
    request = _request(group, extra)

    response = _post(service.http_url, _http_json(request))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field and error["type"] == "InvalidInput"

    err = _grpc_error(service.grpc_target, to_proto(request, pb.ReweightRequest))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == f"{field}: {error['message']}"  # the same message, field first
    assert _trailing(err) == {
        "reweighter-error-type": "InvalidInput",
        "reweighter-error-field": field,
    }


def test_no_groups_on_both_transports(service: BackgroundService) -> None:
    response = _post(service.http_url, b'{"method": "dra", "groups": []}')
    assert response.status_code == 422 and response.json()["error"]["field"] == "groups"
    err = _grpc_error(service.grpc_target, pb.ReweightRequest(method="dra"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and err.details().startswith("groups:")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"groups": [{"rewards": [1, 0], "completions": ["a", "b"]}], "metod": "dra"}', "metod"),
        (b'{"groups": [{"rewards": [1, 0], "completions": ["a", "b"], "x": 1}]}', "groups[0].x"),
        (b'{"groups": [{"rewards": ["1", 0], "completions": ["a", "b"]}]}', "groups[0].rewards[0]"),
        (b'{"groups": [{"completions": ["a", "b"]}]}', "groups[0].rewards"),
        (b'{"groups": [{"rewards": [1], "completions": [3]}]}', "groups[0].completions[0]"),
        (b'{"groups": [{"rewards": [1, NaN], "completions": ["a", "b"]}]}', "groups[0].rewards[1]"),
        (b'{"groups": [{"rewards": [1, 0], "completions": "ab"}]}', "groups[0].completions"),
        (b'{"groups": [], "params": {"similarity_floor": NaN}}', "params.similarity_floor"),
    ],
)
def test_http_schema_errors_name_the_field(
    body: bytes, field: str, service: BackgroundService
) -> None:
    response = _post(service.http_url, body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_http_invalid_json_is_422(service: BackgroundService) -> None:
    response = _post(service.http_url, b'{"groups": [')
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith("invalid JSON")


@pytest.mark.parametrize(("dim", "values"), [(0, []), (3, [1.0, 0.0, 0.0, 1.0])])
def test_grpc_packed_embeddings_that_do_not_divide(
    dim: int, values: list[float], service: BackgroundService
) -> None:
    msg = pb.ReweightRequest(groups=[pb.Group(rewards=[1.0, 0.0])])
    msg.groups[0].embeddings.dim = dim
    msg.groups[0].embeddings.values.extend(values)
    err = _grpc_error(service.grpc_target, msg)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailing(err)["reweighter-error-field"] == "groups[0].embeddings"


def test_clients_raise_the_servers_error_class(
    http: ReweighterClient, grpc_client: GrpcReweighterClient
) -> None:
    request = _request(Group([1.0, 0.0, 1.0], TXT), {})
    for client in (http, grpc_client):
        with pytest.raises(InvalidInput) as info:
            client.reweight(request)
        assert info.value.field == "groups[0].completions"
        assert "rewards has 3" in info.value.message


# -- limits --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(engine: ReweightEngine) -> Iterator[BackgroundService]:
    """Small limits on their own engine, sharing the session's loaded model."""
    settings = loopback(max_groups=2, max_group_size=4, max_completions=6, max_chars=200)
    with BackgroundService(settings, ReweightEngine(settings, embedder=engine.embedder)) as svc:
        yield svc


LIMITS = {
    "too many groups": ([Group([1.0], ["a"])] * 3, "groups"),
    "group too large": ([Group([1.0] * 5, ["a"] * 5)], "groups[0].rewards"),
    "too many completions": ([Group([1.0] * 4, ["a"] * 4), Group([1.0] * 3, ["b"] * 3)], "groups"),
    "too many characters": ([Group([1.0, 0.0], ["x" * 150, "y" * 60])], "groups"),
}


@pytest.mark.parametrize("case", list(LIMITS))
def test_limits_are_413_and_resource_exhausted(case: str, limited: BackgroundService) -> None:
    groups, field = LIMITS[case]
    request = ReweightRequest(groups=groups)
    response = _post(limited.http_url, _http_json(request))
    assert response.status_code == 413
    assert response.json()["error"] == {
        "message": response.json()["error"]["message"],
        "field": field,
        "type": "LimitExceeded",
    }
    err = _grpc_error(limited.grpc_target, to_proto(request, pb.ReweightRequest))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _trailing(err)["reweighter-error-type"] == "LimitExceeded"


def test_limit_errors_are_not_retried(limited: BackgroundService) -> None:
    """RESOURCE_EXHAUSTED means "too big" here, not "busy": retrying would fail the same way."""
    request = ReweightRequest(groups=[Group([1.0], ["a"])] * 3)
    retrying = RetryPolicy(retries=3, backoff=0.01)

    def count() -> float:
        text = httpx.get(f"{limited.http_url}/metrics").text
        line = 'reweighter_requests_total{endpoint="reweight",method="dra",status="LimitExceeded",'
        return sum(
            float(row.rsplit(" ", 1)[1])
            for row in text.splitlines()
            if row.startswith(line) and 'transport="grpc"' in row
        )

    before = count()
    client = GrpcReweighterClient(limited.grpc_target, retry=retrying)
    with client, pytest.raises(LimitExceeded) as info:
        client.reweight(request)
    assert info.value.field == "groups"
    assert count() == before + 1
    with ReweighterClient(limited.http_url, retry=retrying) as client, pytest.raises(LimitExceeded):
        client.reweight(request)


def test_embed_limits(limited: BackgroundService) -> None:
    response = httpx.post(f"{limited.http_url}/v1/embed", json={"inputs": ["a"] * 7})
    assert response.status_code == 413 and response.json()["error"]["field"] == "inputs"
    client = GrpcReweighterClient(limited.grpc_target, retry=NO_RETRY)
    with client, pytest.raises(LimitExceeded):
        client.embed(["a"] * 7)


def test_oversized_http_body_is_413_before_parsing(limited: BackgroundService) -> None:
    body = b'{"groups": [{"rewards": [1], "completions": ["' + b"x" * 3_000_000 + b'"]}]}'
    response = _post(limited.http_url, body)
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "LimitExceeded"


def test_oversized_grpc_message_is_resource_exhausted(limited: BackgroundService) -> None:
    msg = pb.ReweightRequest(groups=[pb.Group(rewards=[1.0], completions=["x" * 3_000_000])])
    err = _grpc_error(limited.grpc_target, msg)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# -- API key -------------------------------------------------------------------------------

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def guarded(engine: ReweightEngine) -> Iterator[BackgroundService]:
    with BackgroundService(loopback(api_key=KEY), engine) as svc:
        yield svc


GOOD = ReweightRequest(groups=[Group([1.0, 0.0], embeddings=[[1, 0], [0, 1]])])


@pytest.mark.parametrize("header", [None, "Bearer wrong", KEY, f"Basic {KEY}"])
def test_http_api_key(header: str | None, guarded: BackgroundService) -> None:
    extra = {"authorization": header} if header else {}
    for response in (
        _post(guarded.http_url, _http_json(GOOD), **extra),
        httpx.get(f"{guarded.http_url}/v1/info", headers=extra),
        httpx.post(f"{guarded.http_url}/v1/embed", json={"inputs": ["a"]}, headers=extra),
    ):
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "Unauthenticated"
    ok = _post(guarded.http_url, _http_json(GOOD), authorization=f"Bearer {KEY}")
    assert ok.status_code == 200


def test_http_health_and_metrics_stay_open(guarded: BackgroundService) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert httpx.get(f"{guarded.http_url}{path}").status_code == 200


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong"),)])
def test_grpc_api_key(metadata: tuple, guarded: BackgroundService) -> None:
    err = _grpc_error(guarded.grpc_target, to_proto(GOOD, pb.ReweightRequest), metadata)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    with grpc.insecure_channel(guarded.grpc_target) as channel:
        ok = pb_grpc.ReweighterStub(channel).Reweight(
            to_proto(GOOD, pb.ReweightRequest), metadata=(("authorization", f"Bearer {KEY}"),)
        )
        assert len(ok.groups[0].rewards) == 2
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING  # no key needed


def test_clients_send_the_key(guarded: BackgroundService) -> None:
    for client in (
        ReweighterClient(guarded.http_url, retry=NO_RETRY),
        GrpcReweighterClient(guarded.grpc_target, retry=NO_RETRY),
    ):
        with client, pytest.raises(Unauthenticated):
            client.reweight(GOOD)
    for client in (
        ReweighterClient(guarded.http_url, api_key=KEY),
        GrpcReweighterClient(guarded.grpc_target, api_key=KEY),
    ):
        with client:
            assert client.reweight(GOOD).groups[0].rewards == pytest.approx([1.0, 0.0], abs=1e-5)


# -- overload ------------------------------------------------------------------------------


def test_overloaded_is_429_and_retried(engine: ReweightEngine) -> None:
    """With room for one request, a second one while the first runs is refused at once (429 /
    RESOURCE_EXHAUSTED, type Overloaded); a retrying client waits its turn and succeeds."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    settings = loopback(max_queue=1)
    busy_engine = ReweightEngine(settings)
    busy_engine.load()
    first = ReweightRequest(groups=[Group([1.0, 0.0], ["the first request", "holds the queue"])])
    small = ReweightRequest(groups=[Group([1.0, 0.0], ["an overloaded service", "retry later"])])
    patient = RetryPolicy(retries=200, backoff=0.02, max_backoff=0.1)
    with BackgroundService(settings, busy_engine) as svc, ThreadPoolExecutor(2) as pool:
        # Holding the model lock keeps the first request running for as long as the test needs,
        # on any device: no race against how fast the encoder is.
        model_lock = busy_engine.embedder._model_lock
        with model_lock:
            running = pool.submit(ReweighterClient(svc.http_url, retry=NO_RETRY).reweight, first)
            deadline = time.monotonic() + 60
            while busy_engine.embedder.batcher.pending == 0:
                assert not running.done() and time.monotonic() < deadline
                time.sleep(0.005)
            response = _post(svc.http_url, _http_json(small))
            assert response.status_code == 429 and response.headers["retry-after"] == "1"
            assert response.json()["error"]["type"] == "Overloaded"
            err = _grpc_error(svc.grpc_target, to_proto(small, pb.ReweightRequest))
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert _trailing(err)["reweighter-error-type"] == "Overloaded"
            waiting = pool.submit(
                GrpcReweighterClient(svc.grpc_target, retry=patient).reweight, small
            )
            time.sleep(0.2)
            assert not waiting.done()  # still retrying: the queue is full
        assert len(running.result(timeout=120).groups[0].rewards) == 2
        assert len(waiting.result(timeout=120).groups[0].rewards) == 2


def test_no_route_runs_a_synchronous_dependency(engine: ReweightEngine) -> None:
    """FastAPI runs a plain `def` dependency in its thread pool: a thread hand-off per request
    (the service's API-key guard was one, on every /v1 call). Every dependency of every API
    route is a coroutine function, so a request stays on the event loop until the engine."""
    import inspect

    from reweighter.api.http.app import create_app
    from reweighter.api.http.routes import api_routes

    app = create_app(engine, loopback())
    sync: list[str] = []
    for path, route in api_routes(app):
        stack = list(route.dependant.dependencies)
        while stack:
            dep = stack.pop()
            stack.extend(dep.dependencies)
            if dep.call is not None and not inspect.iscoroutinefunction(dep.call):
                sync.append(f"{path}: {getattr(dep.call, '__name__', dep.call)}")
    assert [p for p, _ in api_routes(app) if p.startswith("/v1/")], "no /v1 route found"
    assert sync == []
