"""What a method may need beyond rewards and similarities, built by the engine per batch.

A catalogue entry lists its needs (`MethodSpec.needs`: "classes", "memory"); the engine fills
the matching fields and passes the context as the keyword `ctx` to kernels that have needs.
Kernels without needs keep the plain `apply(rewards, sim, mask, params)` signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class MethodContext:
    classes: torch.Tensor | None = None
    """[B, G] long class labels, -1 at masked items (methods/classes.py)."""
    answered: torch.Tensor | None = None
    """[B, G] bool, False where a group's given answer is None (no answer extracted); True at
    every item of a group without answers (its classes come from the embeddings). Darling
    gives an unanswered item no diversity credit."""
    counts: torch.Tensor | None = None
    """[B, G] how often each item's answer was seen for its prompt at earlier steps; -1 where
    the item has no answer (outcome_ucb's memory)."""
