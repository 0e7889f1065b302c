"""Reweighter: diversity-aware reward reweighting for GRPO-style training."""

__version__ = "0.1.0"
