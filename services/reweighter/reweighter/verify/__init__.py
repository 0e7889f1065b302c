"""Base rewards computed by the service itself, for routes whose caller sends completions and
labels but no reward (the OpenRLHF route): a `Verifier` maps (queries, prompts, labels) to one
reward per query, in OpenRLHF's remote-reward convention (a query is prompt + response).

`math_answers` checks a final math answer against the label; `upstream` asks another
OpenRLHF-protocol reward server. Torch-free and FastAPI-free.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Verifier = Callable[[list[str], list[str], list[Any]], Awaitable[list[float]]]
"""(queries, prompts, labels) -> one base reward per query."""


def response_of(query: str, prompt: str) -> str:
    """The completion inside OpenRLHF's query (prompt + response, decoded together)."""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


__all__ = ["Verifier", "response_of"]
