"""The HTTP transport (FastAPI): app.py builds the app, router.py holds the routes,
schemas.py the wire models and their conversions, middleware.py the body-size limit."""

from .app import create_app

__all__ = ["create_app"]
