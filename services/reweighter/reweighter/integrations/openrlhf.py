"""OpenRLHF: the service as OpenRLHF's remote reward model, with diversity-aware rewards.

    --remote_rm_url http://reweighter:8080/v1/openrlhf/reward?n=8

OpenRLHF posts `{"query": [...], "prompts": [...], "labels": [...]}` (one sample per request
in its single-turn executor) and reads `{"rewards": [...], "scores": [...], "extra_logs": {...}}`.
This endpoint scores each sample with a pluggable verifier (the built-in math answer checker,
or an upstream OpenRLHF-protocol reward URL), sends it to group assembly as a member of its
prompt's group of `n` (= `--n_samples_per_prompt`, from `?n=` or the router's default) and
answers with the reweighted reward once the group is whole. `scores` are the verifier's raw
rewards (what OpenRLHF's dynamic filtering and pass-rate logs should see).

Groups: OpenRLHF sends no step or sample id, and the same prompt comes back every epoch, so
this module numbers each prompt's rounds: the first n distinct queries of a prompt form round 0,
the next n round 1, and so on. Member ids are the query's hash, so OpenRLHF's own retries of a
sample are the same member; an identical query while the first is still waiting is a second
member (a repeated completion), not a retry. That bookkeeping is per process (bounded, LRU):
behind several replicas, route by prompt or run the endpoint on one. OpenRLHF gives up on a
request after 180 s, so members wait at most `timeout_s` (default 150 s) here.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from ..errors import InvalidInput, NotReady
from ._stacks import InProcessMembers, MemberBackend

Verifier = Callable[[list[str], list[str], list[Any]], Awaitable[list[float]]]
"""(queries, prompts, labels) -> one base reward per query."""

DEFAULT_TIMEOUT_S = 150.0


# -- verifiers ------------------------------------------------------------------------------


def response_of(query: str, prompt: str) -> str:
    """The completion inside OpenRLHF's query (prompt + response, decoded together)."""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def _boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def extract_answer(response: str) -> str | None:
    """The last \\boxed{...}, else the text after the last "answer is"/"####", else the last
    number in the response."""
    boxed = _boxed(response)
    if boxed is not None:
        return boxed
    for marker in ("####", "answer is", "Answer:"):
        k = response.rfind(marker)
        if k >= 0:
            tail = response[k + len(marker) :].strip()
            numbers = _NUMBER.findall(tail)
            return numbers[0] if numbers else tail.split("\n")[0]
    numbers = _NUMBER.findall(response)
    return numbers[-1] if numbers else None


def _normalise(answer: str) -> str:
    a = answer.strip().strip("$").strip().rstrip(".").replace("\\!", "").replace(" ", "")
    return a.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def _as_number(answer: str) -> Fraction | None:
    a = _normalise(answer).replace(",", "")
    m = re.fullmatch(r"\\frac\{(-?\d+)\}\{(\d+)\}", a)
    if m:
        a = f"{m.group(1)}/{m.group(2)}"
    try:
        return Fraction(a)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(given: str | None, gold: Any) -> bool:
    """Numbers (integers, decimals, fractions, \\frac{a}{b}) compare by value; anything else
    compares as normalised text."""
    if given is None or gold is None:
        return False
    gold_s = str(gold)
    a, b = _as_number(given), _as_number(gold_s)
    if a is not None and b is not None:
        return a == b
    return _normalise(given) == _normalise(gold_s)


def math_verifier() -> Verifier:
    """1.0 when the response's final answer equals the label, else 0.0."""

    async def verify(queries: list[str], prompts: list[str], labels: list[Any]) -> list[float]:
        return [
            1.0 if answers_match(extract_answer(response_of(q, p)), gold) else 0.0
            for q, p, gold in zip(queries, prompts, labels, strict=True)
        ]

    return verify


def upstream_verifier(url: str, *, timeout_s: float = 120.0) -> Verifier:
    """Base rewards from another OpenRLHF-protocol reward server (its "rewards")."""
    import httpx

    async def verify(queries: list[str], prompts: list[str], labels: list[Any]) -> list[float]:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.post(
                url, json={"query": queries, "prompts": prompts, "labels": labels}
            )
            response.raise_for_status()
            rewards = response.json()["rewards"]
        if len(rewards) != len(queries):
            raise ValueError(f"upstream {url} gave {len(rewards)} rewards for {len(queries)}")
        return [float(r[0] if isinstance(r, list) else r) for r in rewards]

    return verify


# -- rounds: which group a query belongs to --------------------------------------------------


@dataclass
class _Prompt:
    round: int = 0
    members: dict[str, tuple[int, float]] = field(default_factory=dict)  # id -> (round, seen)
    in_flight: dict[str, int] = field(default_factory=dict)  # query hash -> waiting calls


class Rounds:
    """Assigns (group_id, member_id) to each query of a prompt, bounded to `max_prompts`.

    A query seen within `retry_window_s` (and not still waiting) is a retry: same round, same
    member. Seen longer ago, it is a new sample of a later round (the prompt came back).
    """

    def __init__(self, max_prompts: int = 100_000, retry_window_s: float = 600.0) -> None:
        self.max_prompts = max_prompts
        self.retry_window_s = retry_window_s
        self._prompts: OrderedDict[str, _Prompt] = OrderedDict()

    @staticmethod
    def _key(prompt: str, n: int) -> str:
        return hashlib.sha256(f"{n}\0{prompt}".encode()).hexdigest()[:24]

    def enter(self, prompt: str, query: str, n: int) -> tuple[str, str, str]:
        """(group_id, member_id, query hash); call `leave(prompt, hash, n)` when answered."""
        now = time.monotonic()
        key = self._key(prompt, n)
        qhash = hashlib.sha256(query.encode()).hexdigest()[:24]
        state = self._prompts.pop(key, None) or _Prompt()
        self._prompts[key] = state  # most recently used last
        while len(self._prompts) > self.max_prompts:
            self._prompts.popitem(last=False)
        copies = state.in_flight.get(qhash, 0)
        member = qhash if copies == 0 else f"{qhash}.{copies}"
        seen = state.members.get(member)
        if seen is not None and now - seen[1] <= self.retry_window_s:
            group_round = seen[0]
        else:
            if sum(1 for r, _ in state.members.values() if r == state.round) >= n:
                state.round += 1
                state.members = {
                    m: v for m, v in state.members.items() if v[0] >= state.round - 1
                }
            group_round = state.round
        state.members[member] = (group_round, now)
        state.in_flight[qhash] = copies + 1
        return f"openrlhf:{key}:{group_round}", member, qhash

    def leave(self, prompt: str, qhash: str, n: int) -> None:
        state = self._prompts.get(self._key(prompt, n))
        if state is not None and qhash in state.in_flight:
            state.in_flight[qhash] -= 1
            if state.in_flight[qhash] <= 0:
                del state.in_flight[qhash]


# -- the endpoint ------------------------------------------------------------------------------


class RemoteRMIn(BaseModel):
    query: list[str] = Field(..., description="prompt + response, decoded")
    prompts: list[str]
    labels: list[Any] | None = None


def make_router(
    verifier: Verifier,
    *,
    members: MemberBackend | None = None,
    n: int | None = None,
    method: str = "dra",
    params: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    path: str = "/v1/openrlhf/reward",
    dependencies: Sequence[Any] | None = None,
) -> APIRouter:
    """The OpenRLHF remote-reward endpoint. `members` defaults to the app's own assembler
    (`request.app.state.assembler`), so these members share groups and bounds with
    /v1/groups. `n`: the default group size when the URL has no `?n=`."""
    router = APIRouter(dependencies=list(dependencies or []))
    rounds = Rounds()
    fixed_params = dict(params or {})

    def backend(request: Request) -> MemberBackend:
        if members is not None:
            return members
        assembler = getattr(request.app.state, "assembler", None)
        if assembler is None:
            raise NotReady("group assembly is not running in this service")
        return InProcessMembers(assembler)

    @router.post(path)
    async def openrlhf_reward(
        body: RemoteRMIn, request: Request, n_query: int | None = Query(None, alias="n")
    ) -> dict[str, Any]:
        size = n_query if n_query is not None else n
        if size is None or size < 1:
            raise InvalidInput("n: give ?n=<n_samples_per_prompt> in the URL", field="n")
        labels = body.labels if body.labels is not None else [None] * len(body.query)
        if not len(body.query) == len(body.prompts) == len(labels):
            raise InvalidInput(
                f"query, prompts and labels differ in length: "
                f"{len(body.query)}, {len(body.prompts)}, {len(labels)}",
                field="prompts",
            )
        raw = await verifier(list(body.query), list(body.prompts), list(labels))
        client = backend(request)

        async def one(q: str, p: str, r: float) -> Any:
            response = response_of(q, p)
            if size == 1:
                return None
            group_id, member_id, qhash = rounds.enter(p, q, size)
            try:
                return await client.submit_member(
                    group_id, member_id, size, r, completion=response, method=method,
                    params=fixed_params, advantages="none", timeout_s=timeout_s,
                )
            finally:
                rounds.leave(p, qhash, size)

        results = await asyncio.gather(
            *(one(q, p, r) for q, p, r in zip(body.query, body.prompts, raw, strict=True))
        )
        pairs = zip(raw, results, strict=True)
        rewards = [r if res is None else float(res.reward) for r, res in pairs]
        return {
            "rewards": rewards,
            "scores": raw,
            "extra_logs": {
                "raw_reward": raw,
                "reweighted": [float(res is not None and res.complete) for res in results],
                "mean_similarity": [
                    res.stats.mean_similarity if res is not None and res.stats else 1.0
                    for res in results
                ],
            },
        }

    return router


def router_from_settings(settings: Any) -> APIRouter:
    """The service's endpoint, behind the service's API key: the math checker, or
    `settings.openrlhf_upstream_url` when set; `settings.openrlhf_n` is the group size when
    the URL gives no `?n=` (both optional)."""
    from fastapi import Depends

    from ..api.auth import check_bearer

    def require_key(request: Request) -> None:
        check_bearer(request.headers.get("authorization"), settings.api_key)

    upstream = getattr(settings, "openrlhf_upstream_url", None)
    verifier = upstream_verifier(upstream) if upstream else math_verifier()
    return make_router(
        verifier, n=getattr(settings, "openrlhf_n", None), dependencies=[Depends(require_key)]
    )
