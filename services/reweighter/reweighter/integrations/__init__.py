"""Adapters that put the Reweighter inside RL training frameworks (TRL, verl, slime, SkyRL).

They run in the trainer's process and depend on `reweighter.client` only (clients come from
`reweighter.client.connect`), so they import in a light install without torch or the server.
"""

from .trl import ReweightedReward, Timings, reweighted

__all__ = ["ReweightedReward", "Timings", "reweighted"]
