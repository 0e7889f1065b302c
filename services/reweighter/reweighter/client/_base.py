"""What every async client shares: the one set of defaults, the group-member call, built once,
and the async context manager. A transport implements `_submit` (send one MemberSubmission) and
`close`."""

from __future__ import annotations

from typing import Any, TypeVar

from ..types import MemberResult, MemberSubmission

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where `reweighter serve` listens by default (HTTP)."""
DEFAULT_GRPC_TARGET = "127.0.0.1:50051"
"""Its gRPC port by default."""
DEFAULT_TIMEOUT_S = 120.0
"""How long one reweight/embed/info call may take before the client gives up: a large batch of
long completions on a CPU service takes tens of seconds. Members wait by their own timeout_s."""
MEMBER_MARGIN_S = 30.0
"""A member's answer may come this long after its timeout_s (Redis, load): the client waits
timeout_s plus this before it gives up."""

C = TypeVar("C", bound="AsyncClientBase")


class AsyncClientBase:
    async def submit_member(self, *args: Any, **fields: Any) -> MemberResult:
        """Send one member of a group and wait for the group (docs/integrations.md): a
        MemberSubmission, or its fields (group_id, member_id, group_size, reward, then by
        keyword completion or embedding, method, params, advantages, timeout_s). Retried like
        every call: it is idempotent. The client waits timeout_s plus a margin, or without a
        deadline when timeout_s is None (the server answers by its own maximum)."""
        if len(args) == 1 and not fields and isinstance(args[0], MemberSubmission):
            sub = args[0]
        else:
            sub = MemberSubmission(*args, **fields)  # the server names a bad value
        deadline = None if sub.timeout_s is None else float(sub.timeout_s) + MEMBER_MARGIN_S
        return await self._submit(sub, deadline)

    async def _submit(self, sub: MemberSubmission, deadline: float | None) -> MemberResult:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: C) -> C:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
