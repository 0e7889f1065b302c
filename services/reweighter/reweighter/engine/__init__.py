"""The engine: the one place a request is checked (checks.py), embedded and reweighted
(compute.py), behind ReweightEngine (core.py). Transports see it through
reweighter.api.protocol.EngineProtocol."""

from .core import ReweightEngine

__all__ = ["ReweightEngine"]
