"""The engine: the one place a request is checked (checks.py), embedded and reweighted
(compute.py), behind ReweightEngine (core.py). Transports see it through
reweighter.engine.surface.EngineSurface (every caller is typed against it)."""

from ..errors import server_extra_missing

try:
    from .core import ReweightEngine
except ModuleNotFoundError as e:  # a light install (`pip install reweighter`) has no torch
    raise (server_extra_missing(e, "reweighter.engine") or e) from e

__all__ = ["ReweightEngine"]
