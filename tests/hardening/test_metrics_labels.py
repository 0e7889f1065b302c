"""Item 4: /metrics label values come from a fixed set, whatever clients send.

A stream of made-up method names, unknown gRPC methods and made-up paths must not add series:
every client-chosen label value collapses to "other". The allowed values are what the service
itself names (its methods, routes and RPCs), whichever requests other tests sent before."""

from __future__ import annotations

import re
import socket
import uuid

import grpc
import httpx
from prometheus_client.parser import text_string_to_metric_families

from reweighter.api.http.routes import endpoint_name
from reweighter.methods.catalog import CATALOG
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2 as pb

from .conftest import AUTH, Served

METHODS = {*CATALOG, "", "other"}  # a method of the catalogue, empty, or "other"


def _served_endpoints(served: Served) -> set[str]:
    """Every endpoint label the service may name itself: its HTTP routes (as its OpenAPI lists
    them), its gRPC RPCs (as the handlers spell them, SubmitMember -> submit_member), "other"."""
    paths = httpx.get(served.url + "/openapi.json", timeout=10).json()["paths"]
    rpcs = [m.name for m in pb.DESCRIPTOR.services_by_name["Reweighter"].methods]
    snake = {re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() for name in rpcs}
    return {endpoint_name(p) for p in paths} | snake | {n.lower() for n in rpcs} | {"other"}


def _label_values(served: Served) -> tuple[dict[str, set[str]], int, int]:
    text = httpx.get(served.url + "/metrics", timeout=10).text
    seen: dict[str, set[str]] = {}
    series = 0
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("reweighter_request"):
            continue
        for sample in family.samples:
            series += sample.name == "reweighter_requests_total"
            for k, v in sample.labels.items():
                seen.setdefault(k, set()).add(v)
    return seen, series, len(text)


def test_client_chosen_names_do_not_become_label_values(keyed: Served) -> None:
    before_series = _label_values(keyed)[1]
    group = {"rewards": [1, 0], "embeddings": [[1, 0], [0, 1]]}
    with httpx.Client(base_url=keyed.url, headers=AUTH, timeout=10) as client:
        for _ in range(40):
            name = f"made-up-{uuid.uuid4().hex}"
            body = {"method": name, "groups": [group]}
            assert client.post("/v1/reweight", json=body).status_code == 422
    # oversized bodies refused before routing, to made-up paths
    for _ in range(10):
        head = f"POST /v1/{uuid.uuid4().hex} HTTP/1.1\r\nhost: x\r\ncontent-length: {1 << 40}"
        with socket.create_connection(("127.0.0.1", keyed.http_port), timeout=5) as sock:
            sock.sendall(head.encode() + b"\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 4")
    with grpc.insecure_channel(keyed.target) as channel:
        for _ in range(20):
            call = channel.unary_unary(f"/reweighter.v1.Reweighter/X{uuid.uuid4().hex}")
            try:  # unauthenticated, unknown method
                call(b"", timeout=5)
            except grpc.RpcError as e:
                assert e.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNIMPLEMENTED)
        for _ in range(20):
            call = channel.unary_unary("/reweighter.v1.Reweighter/Reweight")
            try:  # authenticated, a made-up reweighting method
                name = uuid.uuid4().hex
                call(b"\x0a" + bytes([len(name)]) + name.encode(), metadata=tuple(AUTH.items()))
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    seen, series, size = _label_values(keyed)
    assert seen.get("method", set()) <= METHODS, seen["method"]
    endpoints = _served_endpoints(keyed)
    assert "reweight" in endpoints and "made-up" not in " ".join(endpoints)
    assert seen.get("endpoint", set()) <= endpoints, seen["endpoint"] - endpoints
    # 90 made-up names later, the request counter has a handful more series (new outcomes
    # under "other"), not 90
    assert series - before_series <= 8, (before_series, series)
    text = httpx.get(keyed.url + "/metrics").text
    assert "made-up" not in text and not re.search(r"[0-9a-f]{32}", text)
    assert size < 200_000
