"""The live diversity page: `GET /dashboard` (the page) and `GET /v1/dashboard` (its data).

The page is one static file (static/dashboard.html: hand-written SVG charts, no CDN, works
offline) and carries no data, so it is served openly like `/docs`; its data, the caller's job's
per-step figures (engine/board.py), is a `/v1/` route behind the same admission as every
other, and the job is the caller's tenant, so a tenant sees its own job only.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from ...engine.board import current_job
from ...engine.surface import EngineSurface
from ..metrics import Metrics
from .dispatch import v1_router

PAGE = files(__package__).joinpath("static", "dashboard.html")


def build_dashboard_page() -> APIRouter:
    router = APIRouter(tags=["dashboard"])
    html = PAGE.read_text(encoding="utf-8")

    @router.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        """The page (no data in it: it reads GET /v1/dashboard with the API key)."""
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})

    return router


def build_dashboard_data(engine: EngineSurface, metrics: Metrics) -> APIRouter:
    """Relative to the `/v1` router it is included in."""
    router = v1_router(tags=["dashboard"])

    @router.get("/dashboard")
    async def dashboard_data() -> dict[str, Any]:
        """The caller's job (tenant; "default" without tenants): per step, distinct answers,
        effective size, mean similarity, lambda, zero-spread share and reweighting latency, and
        the collapse alert's state."""
        with metrics.track("http", "dashboard"):
            return engine.board.snapshot(current_job())

    return router
