"""Adapters that put the Reweighter inside RL training frameworks."""

from .trl import Backend, ReweightedReward, Timings, connect, reweighted

__all__ = ["Backend", "ReweightedReward", "Timings", "connect", "reweighted"]
