"""The service's request/answer calls, one entry each: from an entry, the HTTP route
(`POST /v1/<name>`, api/http/router.py), the gRPC method (`<Name>`, api/grpc/servicer.py), the
engine coroutine it runs (`a<name>`, declared in engine/surface.py) and every client's
`call("<name>", request)` (HTTP, gRPC, in process) are derived, with their metrics and errors.

Add a call (the route recipe in the `reweighter` package docstring): its request and result
messages in reweighter.types, the RPC and its messages in the proto (then
scripts/gen_proto.py), the engine coroutine (engine/core.py and engine/surface.py), and one
entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..types import ReweightRequest, ReweightResult


@dataclass(frozen=True)
class Call:
    name: str
    """snake_case: the HTTP path's last segment, the metrics label, the client's call name."""
    request: type
    """Its request message (a reweighter.types dataclass)."""
    result: type
    """Its answer message."""
    doc: str
    """What the call does (the OpenAPI summary)."""
    size: Callable[[Any], int] | None = None
    """Completions in a request, for the completions histogram; None: not observed."""

    @property
    def path(self) -> str:
        return f"/v1/{self.name}"

    @property
    def rpc(self) -> str:
        """The gRPC method: the name in CamelCase (reweight: Reweight)."""
        return "".join(part.title() for part in self.name.split("_"))

    @property
    def engine(self) -> str:
        """The engine coroutine that answers it (reweight: areweight)."""
        return f"a{self.name}"


def _completions(request: ReweightRequest) -> int:
    return sum(len(g.rewards) for g in request.groups)


CALLS: dict[str, Call] = {
    c.name: c
    for c in [
        Call(
            "reweight",
            ReweightRequest,
            ReweightResult,
            "Reweight each group's rewards by its completions' redundancy (and compute "
            "advantages).",
            size=_completions,
        ),
    ]
}


def get_call(name: str) -> Call:
    try:
        return CALLS[name]
    except KeyError:
        raise ValueError(f"unknown call {name!r}; known: {', '.join(CALLS)}") from None
