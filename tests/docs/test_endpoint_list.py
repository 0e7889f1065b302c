"""docs/service.md's endpoint list is every endpoint of both transports, and nothing else: each
HTTP route of the app `create_app` builds (and its OpenAPI pages) and each gRPC method the
server registers (reweighter.v1.Reweighter's from the proto, the health service's, reflection)
is a row's, and every route or method a row names is served."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import loopback
from grpc_health.v1 import health
from grpc_reflection.v1alpha import reflection

from reweighter.api.http.app import create_app
from reweighter.api.http.routes import api_routes
from reweighter.engine import ReweightEngine
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2

ROOT = Path(__file__).resolve().parents[2]
DOCS_PAGES = {("GET", "/openapi.json"), ("GET", "/docs")}  # FastAPI's, outside api_routes


def _rows() -> list[list[str]]:
    page = (ROOT / "docs" / "service.md").read_text()
    table = page.split("<!-- endpoints: begin -->", 1)[1].split("<!-- endpoints: end -->", 1)[0]
    lines = [ln for ln in table.strip().splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def test_every_http_route_is_listed_and_every_listed_route_served() -> None:
    app = create_app(ReweightEngine(loopback()))  # the routes need no model
    served = {
        (verb, re.sub(r"\{(\w+):\w+\}", r"{\1}", path))  # {group_id:path} -> {group_id}
        for path, route in api_routes(app)
        for verb in route.methods
    } | DOCS_PAGES
    listed = {m for row in _rows() for m in re.findall(r"`(GET|POST) (/[^`\s]*)`", row[1])}
    assert listed == served, (sorted(served - listed), sorted(listed - served))


def test_every_grpc_method_is_listed_and_every_listed_method_served() -> None:
    (service,) = reweighter_pb2.DESCRIPTOR.services_by_name.values()
    rows = _rows()
    listed = {m for row in rows for m in re.findall(r"^`(\w+)`", row[2])}
    assert listed == {m.name for m in service.methods}, listed
    cells = " ".join(row[2] for row in rows)
    assert f"`{health.SERVICE_NAME}`" in cells and f"`{reflection.SERVICE_NAME}`" in cells
    assert f'service `""` or `{service.full_name}`' in cells  # both names the server sets
