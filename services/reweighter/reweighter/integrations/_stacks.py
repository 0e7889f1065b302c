"""What the stack adapters (slime, SkyRL, verl, OpenRLHF) share: a backend from a URL or the
environment, and "reweight a flat batch whose groups are given by a key".

The stacks hand over flat lists (one entry per completion) tagged with a group key; the service
wants groups. `reweight_by_key` does that regrouping once, in one backend call, and scatters the
answers back to the flat order, so each adapter stays a few lines of field mapping.
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..assembly.types import MemberResult, MemberSubmission
from ..client._base import AsyncClientBase
from ..types import Group, ReweightRequest, ReweightResult

DEFAULT_URL = "http://127.0.0.1:8080"


class Backend(Protocol):
    """Anything that reweights: ReweighterClient, GrpcReweighterClient, ReweightEngine."""

    def reweight(self, request: ReweightRequest) -> ReweightResult: ...


@dataclass(frozen=True)
class StackSettings:
    """Client-side settings of an adapter. Stacks whose hook is only a function path (slime)
    read them from the environment: REWEIGHTER_URL, REWEIGHTER_API_KEY, REWEIGHTER_METHOD,
    REWEIGHTER_PARAMS (JSON), REWEIGHTER_TIMEOUT_S."""

    url: str = DEFAULT_URL
    api_key: str | None = None
    method: str = "dra"
    params: Mapping[str, Any] = field(default_factory=dict)
    timeout_s: float = 120.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StackSettings:
        env = os.environ if env is None else env
        raw_params = env.get("REWEIGHTER_PARAMS") or "{}"
        try:
            params = json.loads(raw_params)
        except json.JSONDecodeError as e:
            raise ValueError(f"REWEIGHTER_PARAMS is not JSON: {raw_params!r}") from e
        if not isinstance(params, dict):
            raise ValueError(f"REWEIGHTER_PARAMS must be a JSON object, got {raw_params!r}")
        return cls(
            url=env.get("REWEIGHTER_URL") or DEFAULT_URL,
            api_key=env.get("REWEIGHTER_API_KEY") or None,
            method=env.get("REWEIGHTER_METHOD") or "dra",
            params=params,
            timeout_s=float(env.get("REWEIGHTER_TIMEOUT_S") or 120.0),
        )


def backend_from(url: str, *, api_key: str | None = None, timeout_s: float = 120.0) -> Backend:
    """A client for "http(s)://host:port" or "grpc://host:port"."""
    from ..client import GrpcReweighterClient, ReweighterClient

    if url.startswith(("http://", "https://")):
        return ReweighterClient(url, api_key=api_key, timeout=timeout_s)
    if url.startswith("grpc://"):
        return GrpcReweighterClient(url.removeprefix("grpc://"), api_key=api_key, timeout=timeout_s)
    raise ValueError(f"reweighter url {url!r}: expected 'http://host:port' or 'grpc://host:port'")


@dataclass(frozen=True)
class Reweighted:
    """A flat batch's answer, in the batch's order."""

    rewards: list[float]
    advantages: list[float] | None
    mean_similarity: list[float]
    """Each completion's group statistic (the same value for every member of a group)."""
    groups: int


def reweight_by_key(
    backend: Backend,
    keys: Sequence[Hashable],
    rewards: Sequence[float],
    completions: Sequence[str],
    *,
    method: str = "dra",
    params: Mapping[str, Any] | None = None,
    advantages: str = "none",
) -> Reweighted:
    """Reweight a flat batch in ONE backend call; completions with equal keys form a group.

    Groups keep the order of their first member and members keep batch order, so the answer
    does not depend on how the stack interleaved the batch.
    """
    if not len(keys) == len(rewards) == len(completions):
        raise ValueError(
            f"keys, rewards and completions differ in length: "
            f"{len(keys)}, {len(rewards)}, {len(completions)}"
        )
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    if not members:
        return Reweighted([], [] if advantages != "none" else None, [], 0)
    request = ReweightRequest(
        groups=[
            Group(
                rewards=[float(rewards[i]) for i in idx],
                completions=[completions[i] for i in idx],
                id=str(n),
            )
            for n, idx in enumerate(members.values())
        ],
        method=method,
        params=dict(params or {}),
        advantages=advantages,  # type: ignore[arg-type]
    )
    result = backend.reweight(request)
    out = [0.0] * len(keys)
    adv: list[float] | None = None if advantages == "none" else [0.0] * len(keys)
    sim = [0.0] * len(keys)
    for idx, group in zip(members.values(), result.groups, strict=True):
        for j, i in enumerate(idx):
            out[i] = group.rewards[j]
            sim[i] = group.stats.mean_similarity
            if adv is not None and group.advantages is not None:
                adv[i] = group.advantages[j]
    return Reweighted(out, adv, sim, len(members))


MemberBackend = AsyncClientBase
"""Anything that takes one group member and answers once its group is whole: the async clients
(`submit_member`) or an in-process GroupAssembler (wrapped by InProcessMembers)."""


class InProcessMembers(AsyncClientBase):
    """`submit_member` over a GroupAssembler in this process (the OpenRLHF endpoint inside the
    service; tests): one of the clients, minus the wire. The assembler enforces the timeout."""

    def __init__(self, assembler: Any) -> None:
        self.assembler = assembler

    async def _submit(self, sub: MemberSubmission, deadline: float | None) -> MemberResult:
        return await self.assembler.submit(sub)

    async def close(self) -> None:
        return None


def member_backend_from(url: str, *, api_key: str | None = None) -> MemberBackend:
    """An async client for "http(s)://host:port" or "grpc://host:port" that can hold many
    waiting members at once.

    Members wait for their siblings, so a connection pool smaller than the number of members in
    flight could queue the very siblings they wait for: the HTTP pool here is unbounded (the
    service bounds held members and answers 429 beyond), and gRPC multiplexes one channel.
    """
    from ..client import AsyncGrpcReweighterClient, AsyncReweighterClient

    if url.startswith(("http://", "https://")):
        import httpx

        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        http = httpx.AsyncClient(
            base_url=url,
            headers=headers,
            timeout=httpx.Timeout(120.0, connect=5.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        )
        return AsyncReweighterClient(url, api_key=api_key, http=http)  # type: ignore[return-value]
    if url.startswith("grpc://"):
        return AsyncGrpcReweighterClient(  # type: ignore[return-value]
            url.removeprefix("grpc://"), api_key=api_key
        )
    raise ValueError(f"reweighter url {url!r}: expected 'http://host:port' or 'grpc://host:port'")
