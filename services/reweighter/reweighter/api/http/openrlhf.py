"""The OpenRLHF route: the service as OpenRLHF's remote reward model (`--reward.remote_url`).

OpenRLHF posts `{"query": [...], "prompts": [...], "labels": [...]}` (one sample per request in
its single-turn executor) and reads `{"rewards", "scores", "extra_logs"}`. Each sample gets a
base reward from a verifier (reweighter.verify: the math answer checker, or an upstream
OpenRLHF-protocol reward URL), joins its prompt's group of `n` (`?n=`, else `--openrlhf-n`)
through the assembler, and is answered with the reweighted reward once the group is whole.
`scores` stay the verifier's raw rewards (what OpenRLHF's dynamic filtering and pass rates
should see). OpenRLHF sends no step id, so assembly/openrlhf.py (with the rounds, in this
process or, when assembly is on Redis, in Redis for every replica: any replica serves any
sample) numbers each prompt's rounds; each round is numbered among the job's rounds as it opens,
and with `?batch=` (OpenRLHF's --rollout.batch_size, prompts per step) a member's step is that
number // batch (the live page's steps). A sample beyond `n` while its prompt's full round is
being answered is surplus: answered at once with its raw reward, opening no round. A round
answered short and a surplus are reported in `extra_logs` (OpenRLHF logs every key as a metric),
as a WARNING here, and in `reweighter_openrlhf_short_rounds_total`. A surplus shows the URL's
`n` is wrong: from then on every sample with that `n` (and every one still waiting in an open
round) is answered with its raw reward, flagged `wrong_n` in `extra_logs` and counted in
`reweighter_openrlhf_wrong_n_total`, and the reason is logged once, until the URL's `n` changes:
no answer is ever computed over samples of two steps.

Authentication: OpenRLHF's client sends no headers, so besides `/v1/openrlhf/reward` (the
service's bearer key, like every /v1 route) the route is served at `/v1/openrlhf/<token>/reward`
when `--openrlhf-token` is set; the token is checked in constant time by the HTTP admission
step (admission.py) before the body is read, and masked in log lines (reweighter.logs).
docs/integrations.md gives the trade-off.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field

from ...assembly import GroupAssembler, MemberReason, MemberResult, MemberSubmission
from ...assembly.openrlhf import MemoryRounds, Rounds, RoundsStore, Seat, rounds_store
from ...config import OpenRLHFSettings
from ...engine.checks import check_method
from ...errors import InvalidInput, NotReady, Unauthenticated
from ...methods import get_method
from ...methods.catalog import method_names
from ...tenancy import Tenant, Tenants, current_tenant
from ...types import DEFAULT_METHOD
from ...verify import Verifier, response_of
from ...verify.math_answers import canonical_answer, math_verifier
from ...verify.upstream import UpstreamVerifier
from ...wire.http import ErrorOut
from ..metrics import Metrics
from .dispatch import v1_router
from .router import ERROR_RESPONSES

log = logging.getLogger(__name__)

_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    401: {"model": ErrorOut, "description": "missing or wrong API key (/v1/openrlhf/reward) or "
          "OpenRLHF token (/v1/openrlhf/<token>/reward)"},
    409: {"model": ErrorOut, "description": "a sample does not fit its round (`field` names "
          "what differs)"},
    502: {"model": ErrorOut, "description": "the upstream reward server failed; retry"},
}  # fmt: skip

PATH = "/v1/openrlhf/reward"
WRONG_POLL_S = 1.0
"""On a shared rounds store, how often samples waiting here learn that another replica showed
their `n` wrong."""
TOKEN_PATH = re.compile(r"^/v1/openrlhf/(?P<token>[^/]+)/reward$")
"""The route with its secret in the path; `reweighter.logs` masks the same segment."""


class OpenRLHFRewardIn(BaseModel):
    """What OpenRLHF's remote reward client posts."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(..., description="prompt + response, decoded together")
    prompts: list[str]
    labels: list[Any] | None = Field(None, description="the dataset's --data.label_key values")


class OpenRLHFRewardOut(BaseModel):
    """What OpenRLHF reads: `rewards` trains, `scores` feed its filtering and pass-rate logs,
    each `extra_logs` key becomes a logged metric (one number per sample)."""

    rewards: list[float] = Field(..., description="reweighted (raw when the group was short)")
    scores: list[float] = Field(..., description="the verifier's raw rewards")
    extra_logs: dict[str, list[float]] = Field(
        ...,
        description="raw_reward; reweighted (1 when the group was whole); short_round (1 when "
        "answered short: ?n= may not equal n_samples_per_prompt); surplus (1 for a sample "
        "beyond n, answered raw at once; short_round is 1 too); wrong_n (1: answered raw because "
        "a surplus showed this URL's n is wrong; short_round is 1 too); mean_similarity",
    )


@dataclass
class OpenRLHFStats:
    """Plain counters, exported by `_StatsCollector` at scrape time."""

    short_rounds: int = 0  # rounds answered with fewer than n members, or with a surplus
    surplus_rounds: int = 0  # ... of which more samples than n (a surplus, or a round right
    # after a full one)
    wrong_n: int = 0  # samples answered raw because their URL's n was shown wrong


class _StatsCollector(Collector):
    def __init__(self, stats: OpenRLHFStats) -> None:
        self.stats = stats

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "reweighter_openrlhf_short_rounds",
            "OpenRLHF prompt rounds answered with fewer than n members (not reweighted); "
            "cause=surplus: more than n samples came (?n= below n_samples_per_prompt)",
            labels=["cause"],
        )
        family.add_metric(["surplus"], float(self.stats.surplus_rounds))
        family.add_metric(["short"], float(self.stats.short_rounds - self.stats.surplus_rounds))
        yield family
        wrong = CounterMetricFamily(
            "reweighter_openrlhf_wrong_n",
            "OpenRLHF samples answered with their raw reward because a surplus showed that the "
            "URL's ?n= is below n_samples_per_prompt (the log names n and the reason)",
        )
        wrong.add_metric([], float(self.stats.wrong_n))
        yield wrong


def is_token_path(path: str, token: str | None) -> bool:
    """True when `path` is the token route; raises Unauthenticated when its token is wrong.
    HTTP admission (admission.py) calls this before reading the body (and before the bearer
    check)."""
    match = TOKEN_PATH.match(path)
    if match is None:
        return False
    if not token:
        raise Unauthenticated("this service has no OpenRLHF token (--openrlhf-token)")
    if not hmac.compare_digest(match["token"].encode(), token.encode()):
        raise Unauthenticated("wrong OpenRLHF token in the URL")
    return True


def token_tenant(path: str, token: str | None, tenants: Tenants) -> bool | Tenant:
    """`is_token_path` with tenants: with a tenants file, the URL's token is a tenant's
    `openrlhf_token` and names its tenant; without one, the service's --openrlhf-token."""
    table = tenants.table
    if not table.configured:
        return is_token_path(path, token)
    match = TOKEN_PATH.match(path)
    if match is None:
        return False
    tenant = table.resolve_token(match["token"])
    if tenant is None:
        raise Unauthenticated("wrong OpenRLHF token in the URL (no tenant has it)")
    return tenant


def build_openrlhf_router(
    settings: OpenRLHFSettings,
    metrics: Metrics,
    assembler: GroupAssembler | None,
    *,
    verifier: Verifier | None = None,
    method: str = DEFAULT_METHOD,
    paths: tuple[str, ...] = (PATH, "/v1/openrlhf/{token}/reward"),
    late_s: float = 10.0,
    rounds: RoundsStore | None = None,
) -> APIRouter:
    """The route at `paths`. `verifier`: default from `settings` (the upstream URL, else the
    math checker). `method`: the route's method where the URL names none (`?method=`).
    Authentication is admission's (see `is_token_path`). `late_s`: how long after a round
    opened its siblings may still join it when it was opened just after the prompt's full round
    was answered (assembly/openrlhf.py: a late surplus). `rounds`: where prompts' rounds live
    (default: beside the assembler's store, so on its Redis when it has one)."""
    if verifier is None:
        verifier = (
            UpstreamVerifier(settings.upstream_url) if settings.upstream_url else math_verifier()
        )
    if rounds is None:
        rounds = rounds_store(assembler.store) if assembler is not None else MemoryRounds()
    route = OpenRLHFRoute(settings, metrics, assembler, verifier, method, late_s, rounds)
    metrics.registry.register(_StatsCollector(route.stats))
    close = getattr(verifier, "aclose", None)
    router = v1_router(tags=["openrlhf"], on_shutdown=[close] if close else None)
    for path in paths:
        router.add_api_route(
            path, route.reward, methods=["POST"], response_model=OpenRLHFRewardOut,
            responses=_RESPONSES, summary="OpenRLHF remote reward (--reward.remote_url)",
            openapi_extra={"parameters": _parameters(path, settings.n)},
        )  # fmt: skip
    return router


@dataclass
class _TenantRounds:
    """One tenant's prompts' rounds, and the sizes `n` a surplus has shown wrong (each an event
    that releases the samples still waiting with that n; on a shared store, one poll per n
    while samples of it wait here sets it when another replica saw the surplus)."""

    rounds: Rounds
    wrong_now: dict[int, asyncio.Event]
    waiting: dict[int, int] = field(default_factory=dict)
    polls: dict[int, asyncio.Task[None]] = field(default_factory=dict)


class OpenRLHFRoute:
    """The route's state and its steps: a request's samples are verified, seated in their
    prompt's round and answered by the assembler (or raw: surplus, wrong n, n = 1)."""

    def __init__(
        self,
        settings: OpenRLHFSettings,
        metrics: Metrics,
        assembler: GroupAssembler | None,
        verifier: Verifier,
        method: str,
        late_s: float,
        rounds: RoundsStore,
    ) -> None:
        self.settings, self.metrics, self.assembler = settings, metrics, assembler
        self.verifier, self.method, self.late_s = verifier, method, late_s
        self.rounds = rounds
        self.stats = OpenRLHFStats()
        # Each tenant's prompts have their own rounds and their own wrong-n state (tenants are
        # the file's, so this holds at most one entry per tenant): two jobs on one prompt never
        # meet.
        self.per_tenant: dict[str, _TenantRounds] = {}

    async def reward(self, body: OpenRLHFRewardIn, request: Request) -> OpenRLHFRewardOut:
        """The endpoint: every sample of the request, answered together."""
        query = request.query_params
        # counted and timed like any call, a refused method or parameter too (the label is the
        # catalogue's name, or "other": reweighter.api.metrics.method_label)
        with self.metrics.track("http", "openrlhf", query.get("method") or self.method):
            how = _method_of(query, self.method)
            size = _group_size(query.get("n"), self.settings.n)
            batch = _batch(query.get("batch"))
            labels = body.labels if body.labels is not None else [None] * len(body.query)
            if not len(body.query) == len(body.prompts) == len(labels):
                raise InvalidInput(
                    f"query, prompts and labels differ in length: "
                    f"{len(body.query)}, {len(body.prompts)}, {len(labels)}",
                    field="prompts",
                )
            self.metrics.completions.labels("http").observe(len(body.query))
            raw = await self.verifier(list(body.query), list(body.prompts), list(labels))
            quality = getattr(raw, "quality", None) or [None] * len(raw)
            samples = zip(body.query, body.prompts, raw, quality, strict=True)
            results = await asyncio.gather(*(self.sample(size, *s, how, batch) for s in samples))
            return _answer(raw, results)

    def state(self) -> _TenantRounds:
        """The caller's tenant's rounds."""
        t = current_tenant()
        if t not in self.per_tenant:
            rounds = Rounds(
                "openrlhf", self.rounds, job=t, burst_s=self.settings.timeout_s, late_s=self.late_s
            )
            self.per_tenant[t] = _TenantRounds(rounds, {})
        return self.per_tenant[t]

    async def sample(
        self, size: int, query: str, prompt: str, reward: float, quality: float | None,
        how: tuple[str, dict[str, Any]], batch: int | None = None,
    ) -> tuple[MemberResult | None, str]:  # fmt: skip
        """The sample's answer and its flag: None when it needs no group (n = 1); a raw answer
        at once when it is surplus (seated in no round) or its n was shown wrong ("surplus",
        "wrong_n"); else its round's (""), sent with the step `batch` gives it and the quality
        part of its reward (None: all of it)."""
        if size == 1:
            return None, ""
        if self.assembler is None:
            raise NotReady("group assembly is not running in this service")
        job = self.state()
        if await job.rounds.wrong(size):
            await self.shown_wrong(size)  # here too, when another replica saw the surplus
            self.stats.wrong_n += 1
            return _raw(None, reward, -1), "wrong_n"
        seat = await job.rounds.enter(prompt, query, size)
        result: MemberResult | None = None
        left = False
        try:
            if seat.wrong:  # of the next step, after a late surplus opened its round
                await self.shown_wrong(size)
                self.stats.wrong_n += 1
                return _raw(seat, reward, seat.round), "wrong_n"
            if seat.surplus:
                await self.shown_wrong(size)
                result = _raw(seat, reward, seat.round)
                return result, "surplus"
            step = seat.ordinal // batch if batch and seat.ordinal is not None else None
            result = await self.seated(job, seat, size, query, prompt, reward, how, step, quality)
            left = True
            stands = await self.leave(seat, result, size)
            if result is None or not stands:
                # n shown wrong before its round was whole: the round's fate is raw, for every
                # member (decided once, in the prompt's state: see Rules.release)
                self.stats.wrong_n += 1
                return _raw(seat, reward, seat.round), "wrong_n"
            return result, ""
        finally:
            if not left:
                await self.leave(seat, result, size)

    async def seated(
        self, job: _TenantRounds, seat: Seat, size: int, query: str, prompt: str, reward: float,
        how: tuple[str, dict[str, Any]], step: int | None = None, quality: float | None = None,
    ) -> MemberResult | None:  # fmt: skip
        """A seated sample through the assembler: its round's answer, or None when its n was
        shown wrong while it waited (and its round was not whole: it could mix two steps)."""
        assert self.assembler is not None
        response = response_of(query, prompt)
        submit = asyncio.ensure_future(self.assembler.submit(
            MemberSubmission(
                seat.group_id, seat.member_id, size, reward,
                completion=response, method=how[0], params=how[1],
                timeout_s=self.settings.timeout_s,
                answer=canonical_answer(response),  # the checker's reading of it
                step=step, quality=quality,
            )
        ))  # fmt: skip
        wrong = asyncio.ensure_future(job.wrong_now.setdefault(size, asyncio.Event()).wait())
        self._watch(job, size, +1)
        try:
            await asyncio.wait({submit, wrong}, return_when=asyncio.FIRST_COMPLETED)
            if not submit.done() and not await job.rounds.release(seat, size):
                await asyncio.wait({submit})  # a whole round is of one step: its answer
        finally:
            self._watch(job, size, -1)
            wrong.cancel()
            if not submit.done():  # n shown wrong while it waited: its round could mix
                submit.cancel()
        return None if submit.cancelled() else submit.result()

    def _watch(self, job: _TenantRounds, size: int, delta: int) -> None:
        """Count the samples of `size` waiting here; on a shared store, while any waits, one
        task polls whether another replica showed `size` wrong (every WRONG_POLL_S)."""
        job.waiting[size] = job.waiting.get(size, 0) + delta
        if delta > 0 and self.rounds.remote and size not in job.polls:
            job.polls[size] = asyncio.ensure_future(self._poll_wrong(job, size))

    async def _poll_wrong(self, job: _TenantRounds, size: int) -> None:
        event = job.wrong_now.setdefault(size, asyncio.Event())
        try:
            while job.waiting.get(size, 0) > 0 and not event.is_set():
                await asyncio.sleep(WRONG_POLL_S)
                try:
                    if await job.rounds.wrong(size):
                        event.set()
                except Exception as e:  # Redis away: the samples' own waits still end
                    log.debug("OpenRLHF: polling ?n=%d's state failed: %s", size, e)
        finally:
            job.polls.pop(size, None)

    async def shown_wrong(self, size: int) -> None:
        job = self.state()
        event = job.wrong_now.setdefault(size, asyncio.Event())
        if not event.is_set():
            event.set()
            log.warning(
                "OpenRLHF: ?n=%d is wrong: %s. Every later sample with n=%d (and every one "
                "waiting in an open round) is answered with its raw reward, flagged wrong_n, "
                "until ?n= equals --rollout.n_samples_per_prompt",
                size, await job.rounds.wrong(size), size,
            )  # fmt: skip

    async def leave(self, seat: Seat, result: MemberResult | None, size: int) -> bool:
        """The sample's call ended with `result` (None: none): record it in its round. Whether
        a computed answer stands (False: its round's fate is raw)."""
        members = result.members if result is not None and not result.complete else size
        try:
            left = await self.state().rounds.leave(
                seat, answered=result is not None, members=members, n=size
            )
        except Exception as e:  # the answer stands; the round's bookkeeping heals by time
            log.warning("OpenRLHF: a sample's round could not be updated: %s", e)
            return True
        short = left.short
        if short is not None:
            self.stats.short_rounds += 1
            self.stats.surplus_rounds += short.after_full_round
            log.warning("OpenRLHF: %s", short.message())
        return left.stands


def _raw(seat: Seat | None, reward: float, rnd: int) -> MemberResult:
    """A sample's answer with its raw reward (no round, or none to wait for)."""
    gid, mid = (seat.group_id, seat.member_id) if seat else ("", "")
    return MemberResult(
        gid, mid, reward, reward, None, complete=False,
        reason=MemberReason.SHORT, stats=None, members=1, round=rnd,
    )  # fmt: skip


def _parameters(path: str, n_default: int | None = None) -> list[dict[str, Any]]:
    """The route's parameters as the document states them: `n` (read by `_group_size`, not
    declared on the endpoint, which takes the body whole; required unless the service sets
    one), the method and its parameters (the catalogue's, one query key each), and the path's
    token."""
    how = [
        {"name": "method", "in": "query", "required": False,
         "schema": {"type": "string", "enum": method_names()},
         "description": "the reweighting method (default: dra)"},
        {"name": "params", "in": "query", "required": False, "style": "form", "explode": True,
         "schema": _query_params(),
         "description": "the method's parameters, one query key each (`&lambda=0.5`); "
         "GET /v1/info lists each method's"},
    ]  # fmt: skip
    n = {
        "name": "n", "in": "query", "required": n_default is None,
        "schema": {"type": "integer", "minimum": 1},
        "description": "--rollout.n_samples_per_prompt (the group size); required unless the "
        "service sets --openrlhf-n",
    }  # fmt: skip
    batch = {
        "name": "batch", "in": "query", "required": False,
        "schema": {"type": "integer", "minimum": 1},
        "description": "--rollout.batch_size (prompts per step): each member's step, for the "
        "live page (/dashboard), is its round's number among the job's rounds // batch",
    }  # fmt: skip
    if "{token}" not in path:
        return [n, batch, *how]
    token = {
        "name": "token", "in": "path", "required": True, "schema": {"type": "string"},
        "description": "the service's --openrlhf-token, or a tenant's openrlhf_token",
    }  # fmt: skip
    return [n, batch, *how, token]


def _query_params() -> dict[str, Any]:
    """Every catalogue method's parameters as one object of scalars (a query key each); which
    of them the chosen method takes is the engine's rule (a key of another method is a 422
    naming it): a schema of one object cannot tie keys to `?method=`."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for name in method_names():
        schema = get_method(name).params_model.model_json_schema(by_alias=True)
        for key, prop in schema.get("properties", {}).items():
            prop = {k: v for k, v in prop.items() if k not in ("default", "title")}
            if key not in _NOT_PARAMS and prop not in seen.setdefault(key, []):
                seen[key].append(prop)
    props = {k: ps[0] if len(ps) == 1 else {"anyOf": ps} for k, ps in seen.items()}
    return {"type": "object", "properties": props, "additionalProperties": False}


_NOT_PARAMS = frozenset({"n", "method", "batch"})
"""The query keys of the route itself; every other key is a parameter of the method."""


def _method_of(query: Mapping[str, str], default: str) -> tuple[str, dict[str, Any]]:
    """`?method=` (else the route's) and its parameters, every other query key
    (`?n=8&method=mmr&lambda=0.5`; a JSON scalar such as 0.5 or true is read as one, anything
    else as text), judged by the engine's checks before any sample is seated: a bad one is a
    422 naming its query key, never a round of mixed settings."""
    name = query.get("method") or default
    params = {k: _scalar(v) for k, v in query.items() if k not in _NOT_PARAMS}
    try:
        check_method(name, params)
    except InvalidInput as e:
        field = e.field.removeprefix("params.") if e.field else None
        raise InvalidInput(e.message, field=field) from e
    return name, params


def _scalar(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) or value is None else text


def _batch(given: str | None) -> int | None:
    """?batch= (OpenRLHF's --rollout.batch_size: prompts per step), or None."""
    if given is None:
        return None
    if not given.isdigit() or int(given) < 1:
        raise InvalidInput(f"must be a positive integer, got {given!r}", field="batch")
    return int(given)


def _group_size(given: str | None, default: int | None) -> int:
    """?n= (OpenRLHF's n_samples_per_prompt), else the service's --openrlhf-n."""
    if given is None:
        if default is None:
            raise InvalidInput("give ?n=<n_samples_per_prompt> in the URL", field="n")
        return default
    if not given.isdigit() or int(given) < 1:
        raise InvalidInput(f"must be a positive integer, got {given!r}", field="n")
    return int(given)


def _answer(raw: list[float], answers: list[tuple[MemberResult | None, str]]) -> OpenRLHFRewardOut:
    results = [res for res, _ in answers]

    def whole(res: MemberResult | None) -> bool:
        return res is None or res.complete

    return OpenRLHFRewardOut(
        rewards=[
            r if res is None else float(res.reward) for r, res in zip(raw, results, strict=True)
        ],
        scores=raw,
        extra_logs={
            "raw_reward": raw,
            "reweighted": [float(res is not None and res.complete) for res in results],
            "short_round": [float(not whole(res)) for res in results],
            "surplus": [float(flag == "surplus") for _, flag in answers],
            "wrong_n": [float(flag == "wrong_n") for _, flag in answers],
            "mean_similarity": [
                res.stats.mean_similarity if res is not None and res.stats else 1.0
                for res in results
            ],
        },
    )
