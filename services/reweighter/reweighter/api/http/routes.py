"""What an app's routes declare, read from the routes themselves: their metrics labels and the
field names of their request models.

The error handler names the field at fault with these names, and the metrics count each route
under its own label, so a route added to the app (by `create_app`, or later with
`app.include_router`) gets field-named errors and its own metrics without being listed anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, get_args

from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel
from starlette.routing import compile_path


def endpoint_name(path: str) -> str:
    """The metrics label of a path: its last segment ("/v1/reweight" -> "reweight"); the
    OpenRLHF route (which may carry a secret segment) is "openrlhf"."""
    if path.startswith("/v1/openrlhf/"):
        return "openrlhf"
    return path.rsplit("/", 1)[-1] or "root"


def api_routes(app: FastAPI) -> list[tuple[str, APIRoute]]:
    """(full path, route) of every API route of `app`, included routers' routes with their
    prefixes (the docs pages are not API routes)."""
    out = []
    for ctx in iter_route_contexts(app.routes):
        if isinstance(ctx.original_route, APIRoute):
            out.append((ctx.path or ctx.original_route.path, ctx.original_route))
    return out


def route_labels(app: FastAPI) -> list[str]:
    """The endpoint label of each API route of `app`."""
    return [endpoint_name(path) for path, _ in api_routes(app)]


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models(arg)


def _model_fields(model: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[str]:
    if model in seen:
        return
    seen.add(model)
    for name, f in model.model_fields.items():
        yield name
        if f.alias:
            yield f.alias
        for inner in _models(f.annotation):
            yield from _model_fields(inner, seen)


class RequestFields:
    """The field names of every route's request: body models (nested ones included), path and
    query parameters. Recomputed only when the app's routes change."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._count = -1
        self._names: set[str] = set()

    def __call__(self) -> set[str]:
        routes = api_routes(self.app)
        if len(routes) != self._count:
            self._count = len(routes)
            self._names = self._collect(route for _, route in routes)
        return self._names

    @staticmethod
    def _collect(routes: Iterable[APIRoute]) -> set[str]:
        names: set[str] = set()
        seen: set[type[BaseModel]] = set()
        for route in routes:
            d = route.dependant
            body = d.body_params
            for p in body:
                if len(body) > 1:  # FastAPI then nests each body under its parameter name
                    names.add(p.alias)
                for model in _models(p.field_info.annotation):
                    names.update(_model_fields(model, seen))
            names.update(p.alias for p in (*d.path_params, *d.query_params))
        return names


class RouteMethods:
    """The methods each path of the app's API routes takes: admission lets a request whose path
    is known but whose method is not pass straight to the router, which answers 405 naming the
    methods (`Allow`), before any key is asked for (the method is not a secret, and a 401 would
    tell the client to send a key it already has).

    Read off the routes when first asked, and again (at most once a second) when a path or a
    method is not in the table: a route added later is found, and a flood of unknown paths
    does not make every request walk the routes."""

    REFRESH_S = 1.0

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._built_at = -float("inf")
        self._exact: dict[str, frozenset[str]] = {}
        self._patterns: list[tuple[Any, frozenset[str]]] = []

    def __call__(self, path: str, method: str) -> bool | None:
        """Whether `path` takes `method`; None for a path no API route has."""
        found = self._lookup(path)
        if found is None or method not in found:
            now = time.monotonic()
            if now - self._built_at >= self.REFRESH_S:
                self._build(api_routes(self.app))
                self._built_at = now
                found = self._lookup(path)
        return None if found is None else method in found

    def _lookup(self, path: str) -> frozenset[str] | None:
        found = self._exact.get(path)
        for regex, methods in self._patterns:
            if regex.match(path):
                found = methods if found is None else found | methods
        return found

    def _build(self, routes: list[tuple[str, APIRoute]]) -> None:
        exact: dict[str, set[str]] = {}
        patterns: dict[str, tuple[Any, set[str]]] = {}
        for path, route in routes:
            methods = set(route.methods or ())
            if "{" not in path:
                exact.setdefault(path, set()).update(methods)
            else:
                regex = patterns.setdefault(path, (compile_path(path)[0], set()))
                regex[1].update(methods)
        self._exact = {p: frozenset(m) for p, m in exact.items()}
        self._patterns = [(r, frozenset(m)) for r, m in patterns.values()]
