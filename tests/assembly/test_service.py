"""Group assembly on real servers on loopback: two replicas (two services over one engine)
sharing a real Redis, members shuffled across replicas and transports, retried, some groups left
short; every complete answer equals /v1/reweight on the group in member_id order. Conflict,
timeout, auth and bound cases over HTTP and gRPC."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch

from reweighter.assembly import MemberResult, MemberSubmission
from reweighter.client import (
    AsyncGrpcReweighterClient,
    AsyncReweighterClient,
    GrpcReweighterClient,
    RetryPolicy,
    ReweighterClient,
)
from reweighter.engine import ReweightEngine
from reweighter.errors import (
    Conflict,
    InvalidInput,
    Overloaded,
    PreconditionFailed,
    Unauthenticated,
)
from reweighter.methods import advantages
from reweighter.server import BackgroundService
from reweighter.types import Group, ReweightRequest

from .conftest import settings

KEY = "assembly-test-key"
AUTH = {"authorization": f"Bearer {KEY}"}
NO_RETRY = RetryPolicy(retries=0)
G = 8


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.fixture(scope="module")
def replicas(engine: ReweightEngine, shared_redis_url: str) -> Iterator[list[BackgroundService]]:
    """Two services over one engine and one Redis, as two pods behind a Service would be."""
    import redis

    prefix = f"test:asm:svc:{uuid.uuid4().hex}:"
    s = settings(redis_url=shared_redis_url, assembly_prefix=prefix, api_key=KEY)
    services = [BackgroundService(s, engine).start() for _ in range(2)]
    try:
        yield services
    finally:
        for svc in services:
            svc.stop()
        client = redis.Redis.from_url(shared_redis_url)
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)


def _groups(
    n: int, rng: random.Random, tag: str, timeout_s: float = 60
) -> list[list[MemberSubmission]]:
    out = []
    for gi in range(n):
        gid = f"{tag}/{uuid.uuid4().hex[:8]}-{gi}"  # a "/" in the id travels percent-encoded
        out.append(
            [
                MemberSubmission(
                    gid, str(mid), G, float(rng.random() < 0.5),
                    embedding=[rng.gauss(0, 1) for _ in range(16)],
                    method=("dra", "mmr")[gi % 2], advantages="grpo", timeout_s=timeout_s,
                )  # fmt: skip
                for mid in rng.sample(range(100), G)  # "7" > "42": string order, not numeric
            ]
        )
    return out


async def _send(client, m: MemberSubmission) -> MemberResult:
    return await client.submit_member(
        m.group_id, m.member_id, m.group_size, m.reward, completion=m.completion,
        embedding=m.embedding, method=m.method, params=dict(m.params),
        advantages=m.advantages, timeout_s=m.timeout_s,
    )  # fmt: skip


def _expected(groups: list[list[MemberSubmission]], url: str) -> dict[tuple[str, str], tuple]:
    """/v1/reweight over HTTP on each group in member_id order: {(gid, mid): (reward, adv)}."""
    want = {}
    with ReweighterClient(url, api_key=KEY, retry=NO_RETRY) as http:
        for g in groups:
            ms = sorted(g, key=lambda m: m.member_id)
            group = Group([m.reward for m in ms], embeddings=[m.embedding for m in ms])
            res = http.reweight(ReweightRequest([group], ms[0].method, {}, "grpo")).groups[0]
            for i, m in enumerate(ms):
                want[(m.group_id, m.member_id)] = (res.rewards[i], res.advantages[i])
    return want


@pytest.mark.slow
async def test_hundred_groups_shuffled_across_replicas_and_transports(
    replicas: list[BackgroundService],
) -> None:
    rng = random.Random(12)
    # short groups wait 10 s: long enough that the burst (slow on a loaded 2-core machine) has
    # passed when they time out, so their timeout answers find the store responsive
    full, short = _groups(100, rng, "full"), _groups(6, rng, "short", timeout_s=10.0)
    jobs = [(m, rng.randrange(2), rng.randrange(2)) for g in full for m in g]  # replica, gRPC?
    retried = [(m, 1 - r, rng.randrange(2)) for m, r, _ in rng.sample(jobs, 40)]
    jobs += retried + [(m, rng.randrange(2), rng.randrange(2)) for g in short for m in g[:5]]
    rng.shuffle(jobs)
    computed_metric = "reweighter_assembly_groups_computed_total"
    computed = sum(metric(s.http_url, computed_metric) for s in replicas)

    clients: list[list] = []
    for svc in replicas:
        clients.append(
            [  # members wait holding a connection: the HTTP client's pool is unbounded
                AsyncReweighterClient(svc.http_url, api_key=KEY, retry=NO_RETRY),
                AsyncGrpcReweighterClient(svc.grpc_target, api_key=KEY, retry=NO_RETRY),
            ]
        )
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(_send(clients[r][t], m) for m, r, t in jobs)), 90
        )
    finally:
        for pair in clients:
            for c in pair:
                await c.close()

    want = _expected(full, replicas[0].http_url)
    short_ids = {g[0].group_id for g in short}
    short_members = {g[0].group_id: g[:5] for g in short}
    by_member: dict[tuple[str, str], list[MemberResult]] = {}
    for (m, _, _), r in zip(jobs, results, strict=True):
        assert (r.group_id, r.member_id) == (m.group_id, m.member_id)
        by_member.setdefault((m.group_id, m.member_id), []).append(r)
        if m.group_id in short_ids:
            assert (r.complete, r.stats) == (False, None)
            assert r.reward == r.raw_reward == m.reward
            # the round closed at the first deadline over the 5 present; store_unavailable
            # only when the store was too slow to answer by the deadline (then: the members
            # that waited on the member's replica)
            assert r.reason in ("short", "store_unavailable")
            assert r.members == 5 if r.reason == "short" else 1 <= r.members <= 5
            if r.reason == "short":
                present = sorted(short_members[m.group_id], key=lambda x: x.member_id)
                rewards = torch.tensor([x.reward for x in present])
                adv = advantages(rewards, "grpo")[[x.member_id for x in present].index(m.member_id)]
                assert r.advantage == pytest.approx(float(adv), abs=1e-6)
            continue
        assert r.complete and r.members == G and r.raw_reward == m.reward
        assert r.reward == pytest.approx(want[(m.group_id, m.member_id)][0], abs=1e-6)
        assert r.advantage == pytest.approx(want[(m.group_id, m.member_id)][1], abs=1e-6)
    for key, answers in by_member.items():  # a retry at the other replica: the same answer
        assert all(a == answers[0] for a in answers), key
    after = sum(metric(s.http_url, computed_metric) for s in replicas)
    assert after - computed == len(full)  # each group computed once, across both replicas
    assert all(metric(s.http_url, "reweighter_assembly_waiting_members") == 0 for s in replicas)
    assert sum(metric(s.http_url, "reweighter_assembly_timeouts_total") for s in replicas) >= 30


def test_retry_after_completion_and_conflicts_over_both_transports(
    replicas: list[BackgroundService],
) -> None:
    (g,) = _groups(1, random.Random(3), "conflict", timeout_s=30)
    g = [MemberSubmission(**{**m.__dict__, "group_size": 2}) for m in g[:2]]
    with (
        ReweighterClient(replicas[0].http_url, api_key=KEY, retry=NO_RETRY) as http,
        GrpcReweighterClient(replicas[1].grpc_target, api_key=KEY, retry=NO_RETRY) as rpc,
    ):

        def replace(m: MemberSubmission, **change: object) -> MemberSubmission:
            return MemberSubmission(**{**m.__dict__, **change})

        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(_sync_send, http, g[0])  # the group is open while it waits
            for _ in range(1000):  # up to 20 s: a loaded machine
                if metric(replicas[0].http_url, "reweighter_assembly_waiting_members") >= 1:
                    break
                time.sleep(0.02)
            assert metric(replicas[0].http_url, "reweighter_assembly_waiting_members") >= 1
            for client in (http, rpc):  # refused while the group is open, naming the field
                with pytest.raises(Conflict) as e:
                    _sync_send(client, replace(g[0], reward=0.5))
                assert e.value.field == "reward"
                for change, field in (({"method": "none"}, "method"), ({"group_size": 3},
                                                                        "group_size")):
                    with pytest.raises(PreconditionFailed) as e:
                        _sync_send(client, replace(g[1], **change))
                    assert e.value.field == field
            raw = httpx.post(
                f"{replicas[1].http_url}/v1/groups/{g[0].group_id.replace('/', '%2F')}/members",
                json={"member_id": g[0].member_id, "group_size": 2, "reward": 0.25,
                      "embedding": list(g[0].embedding), "advantages": "grpo"},
                headers=AUTH,
            )  # fmt: skip
            assert raw.status_code == 409 and raw.json()["error"]["type"] == "Conflict"
            second = _sync_send(rpc, g[1])
            first = waiting.result(30)
        assert first.complete and second.complete
        assert _sync_send(rpc, g[0]) == first  # after completion, other replica and transport
        # after completion a changed member is no retry: it is in round 1 (short at its timeout)
        for client in (http, rpc):
            late = _sync_send(client, replace(g[0], member_id="new", timeout_s=0.3))
            assert (late.complete, late.reason, late.round, late.members) == (
                False, "short", 1, 1
            )  # fmt: skip


def _sync_send(client, m: MemberSubmission) -> MemberResult:
    return client.submit_member(
        m.group_id, m.member_id, m.group_size, m.reward, embedding=m.embedding,
        method=m.method, advantages=m.advantages, timeout_s=m.timeout_s, answer=m.answer,
    )  # fmt: skip


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_a_changed_member_after_its_round_is_a_409_on_both_transports(
    engine: ReweightEngine, store: str, request: pytest.FixtureRequest
) -> None:
    """Issue 29 point 2, as a user meets it: a group completes; the same (group_id, member_id)
    sent again with another reward (or only another answer) is 409 / ALREADY_EXISTS naming
    `reward` (`answer`) over HTTP and gRPC,
    on the in-process store and on Redis; the unchanged member still gets its stored answer."""
    extra: dict[str, object] = {}
    if store == "redis":
        extra = {"redis_url": request.getfixturevalue("shared_redis_url"),
                 "assembly_prefix": request.getfixturevalue("prefix")}  # fmt: skip
    with (
        BackgroundService(settings(**extra), engine) as svc,
        ReweighterClient(svc.http_url, retry=NO_RETRY) as http,
        GrpcReweighterClient(svc.grpc_target, retry=NO_RETRY) as rpc,
    ):
        g = [MemberSubmission("answered/1", m, 2, r, embedding=e, timeout_s=30, answer="7")
             for m, r, e in (("a", 1.0, [1.0, 0.0]), ("b", 0.0, [0.0, 1.0]))]  # fmt: skip
        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(_sync_send, (http, rpc), g))
        assert all(r.complete for r in done)
        changed = MemberSubmission(**{**g[0].__dict__, "reward": 0.5})
        # the answer alone (darling and outcome_ucb read it) is as much a change as the reward
        answer_only = MemberSubmission(**{**g[0].__dict__, "answer": "8"})
        for client in (http, rpc):
            for sent, field in ((changed, "reward"), (answer_only, "answer")):
                with pytest.raises(Conflict) as e:
                    _sync_send(client, sent)
                assert e.value.field == field
                assert (e.value.http_status, e.value.grpc_code) == (409, "ALREADY_EXISTS")
            assert _sync_send(client, g[0]) == done[0]  # a retry still gets the answer
        raw = httpx.post(
            f"{svc.http_url}/v1/groups/answered%2F1/members",
            json={"member_id": "a", "group_size": 2, "reward": 0.5, "embedding": [1.0, 0.0],
                  "answer": "7"},
        )
        assert raw.status_code == 409
        assert (raw.json()["error"]["type"], raw.json()["error"]["field"]) == ("Conflict", "reward")
        # said so in the request (reuse_ids): a member of the next round, on either transport
        for rnd, client in enumerate((http, rpc), start=1):
            reused = MemberSubmission(**{**changed.__dict__, "reuse_ids": True, "timeout_s": 0.3,
                                         "reward": 0.5 + rnd})  # fmt: skip
            late = client.submit_member(reused)
            assert (late.complete, late.round, late.raw_reward) == (False, rnd, 0.5 + rnd)


def test_bad_member_auth_and_bounds(engine: ReweightEngine) -> None:
    s = settings(api_key=KEY, assembly_max_open_groups=1)
    with BackgroundService(s, engine) as svc:
        url = f"{svc.http_url}/v1/groups/g1/members"
        ok = {"member_id": "a", "group_size": 2, "reward": 1.0, "embedding": [1.0, 0.0]}
        assert httpx.post(url, json=ok).status_code == 401
        bad = httpx.post(url, json={**ok, "reward": "one"}, headers=AUTH)
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "reward"
        zero = httpx.post(url, json={**ok, "embedding": [0.0, 0.0]}, headers=AUTH)
        assert zero.status_code == 422 and zero.json()["error"]["field"] == "embedding"
        with (
            ReweighterClient(svc.http_url, retry=NO_RETRY) as anon,
            GrpcReweighterClient(svc.grpc_target, retry=NO_RETRY) as anon_rpc,
            GrpcReweighterClient(svc.grpc_target, api_key=KEY, retry=NO_RETRY) as rpc,
        ):
            for client in (anon, anon_rpc):
                with pytest.raises(Unauthenticated):
                    client.submit_member("g", "a", 2, 1.0, embedding=[1.0])
            with pytest.raises(Unauthenticated):
                anon_rpc.submit_members([MemberSubmission("g", "a", 2, 1.0, embedding=[1.0])])
            with pytest.raises(InvalidInput) as e:
                rpc.submit_member("g", "a", 0, 1.0, embedding=[1.0])
            assert e.value.field == "group_size"
            # one open group is the bound: a second one is refused with 429 / RESOURCE_EXHAUSTED
            with httpx.Client(timeout=10) as c:
                waiting = c.build_request("POST", url, json={**ok, "timeout_s": 3}, headers=AUTH)
                holder = threading.Thread(target=lambda: c.send(waiting))
                holder.start()
                try:
                    for _ in range(100):
                        if metric(svc.http_url, "reweighter_assembly_open_groups") == 1:
                            break
                        threading.Event().wait(0.02)
                    refused = httpx.post(
                        f"{svc.http_url}/v1/groups/g2/members", json=ok, headers=AUTH
                    )
                    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
                    with pytest.raises(Overloaded):
                        rpc.submit_member("g3", "a", 2, 1.0, embedding=[1.0, 0.0])
                finally:
                    holder.join(10)


async def test_many_members_over_one_grpc_stream(replicas: list[BackgroundService]) -> None:
    rng = random.Random(8)
    groups = _groups(10, rng, "stream")
    members = [m for g in groups for m in g]
    rng.shuffle(members)
    bad = MemberSubmission(**{**members[0].__dict__, "group_size": 3})  # does not fit its group
    async with AsyncGrpcReweighterClient(
        replicas[0].grpc_target, api_key=KEY, retry=NO_RETRY
    ) as rpc:
        answers = await asyncio.wait_for(
            _collect(rpc.submit_members(members[:40] + [bad] + members[40:])), 30
        )
    errors = [a for a in answers if not isinstance(a, MemberResult)]
    assert len(errors) == 1 and isinstance(errors[0], PreconditionFailed)
    assert errors[0].field == "group_size"
    results = {(a.group_id, a.member_id): a for a in answers if isinstance(a, MemberResult)}
    assert len(results) == len(members)
    want = _expected(groups, replicas[1].http_url)
    for key, (reward, adv) in want.items():
        assert results[key].complete
        assert results[key].reward == pytest.approx(reward, abs=1e-6)
        assert results[key].advantage == pytest.approx(adv, abs=1e-6)


async def _collect(stream) -> list:
    return [a async for a in stream]


def test_member_answers_reach_darling_across_replicas(replicas: list[BackgroundService]) -> None:
    """Members carry `answer` on both transports; the assembled group is reweighted by darling
    with those answers as its classes (the hand case of tests/methods/test_methods_classes.py)."""
    gid = f"darling-{uuid.uuid4().hex}"
    answers = ["4", "4", "5", None]
    rewards = [1.0, 1.0, 0.5, 0.0]
    vecs = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    members = [
        MemberSubmission(gid, f"m{i}", 4, rewards[i], embedding=vecs[i], method="darling",
                         answer=answers[i], timeout_s=60)
        for i in range(4)
    ]  # fmt: skip
    with (
        ReweighterClient(replicas[0].http_url, api_key=KEY, retry=NO_RETRY) as http,
        GrpcReweighterClient(replicas[1].grpc_target, api_key=KEY, retry=NO_RETRY) as rpc,
        ThreadPoolExecutor(4) as pool,
    ):
        futures = [
            pool.submit((http if i % 2 else rpc).submit_member, m) for i, m in enumerate(members)
        ]
        results = [f.result(timeout=120) for f in futures]
    assert all(r.complete for r in results)
    assert [r.reward for r in results] == pytest.approx([2 / 3, 2 / 3, 0.5, 0.0])
    assert all(r.stats.classes == 3 and r.stats.distinct_answers == 2 for r in results)


def test_members_carry_outcome_ucb_and_pass_at_k_on_both_transports(
    replicas: list[BackgroundService],
) -> None:
    """step, prompt_key and advantage_params travel with each member over HTTP and gRPC (the
    members of one group split across replicas and transports): outcome_ucb's memory counts a
    step once, pass_at_k gets its k; a missing field is a 422 naming it, a member that differs
    from its group a 409 naming it, on both transports."""
    key = f"prompt-{uuid.uuid4().hex}"

    def ucb(gid: str, step: int, answers: list[str | None], **kw: object) -> list:
        return [
            MemberSubmission(gid, f"m{i}", len(answers), 0.0, embedding=[1.0, float(i)],
                             method="outcome_ucb", params={"scale": 1.0, "baseline": None},
                             answer=a, step=step, prompt_key=key, timeout_s=60, **kw)  # type: ignore[arg-type]
            for i, a in enumerate(answers)
        ]  # fmt: skip

    with (
        ReweighterClient(replicas[0].http_url, api_key=KEY, retry=NO_RETRY) as http,
        GrpcReweighterClient(replicas[1].grpc_target, api_key=KEY, retry=NO_RETRY) as rpc,
        ThreadPoolExecutor(4) as pool,
    ):

        def send_all(members: list[MemberSubmission]) -> list[MemberResult]:
            futures = [
                pool.submit((http if i % 2 else rpc).submit_member, m)
                for i, m in enumerate(members)
            ]
            return [f.result(timeout=120) for f in futures]

        first = send_all(ucb(f"u1-{key}", 1, ["a", "a", None]))
        assert [r.reward for r in first] == pytest.approx([1.0, 1.0, 0.0])
        second = send_all(ucb(f"u2-{key}", 2, ["a", "b"]))
        assert [r.reward for r in second] == pytest.approx([2**-0.5, 1.0])  # a twice at step 1
        pk = [
            MemberSubmission(f"pk-{key}", f"m{i}", 4, float(i == 1), embedding=[1.0, float(i)],
                             method="none", advantages="pass_at_k", advantage_params={"k": 2},
                             timeout_s=60)
            for i in range(4)
        ]  # fmt: skip
        assert [r.advantage for r in send_all(pk)] == pytest.approx([-1 / 3, 1.0, -1 / 3, -1 / 3])

        for client in (http, rpc):
            bad = ucb(f"bad-{key}", 3, ["a"])[0]
            for change, field in (
                ({"step": None}, "step"),
                ({"prompt_key": None}, "prompt_key"),
                ({"method": "none", "params": {}, "advantages": "pass_at_k",
                  "advantage_params": {"k": 2}}, "advantage_params.k"),  # above group_size 1
            ):  # fmt: skip
                with pytest.raises(InvalidInput) as e:
                    client.submit_member(MemberSubmission(**{**bad.__dict__, **change}))
                assert e.value.field == field
                assert (e.value.http_status, e.value.grpc_code) == (422, "INVALID_ARGUMENT")

        open_ = ucb(f"agree-{key}", 4, ["a", "b"])
        held = pool.submit(http.submit_member, open_[0])
        for _ in range(1000):  # up to 20 s: a loaded machine
            if metric(replicas[0].http_url, "reweighter_assembly_waiting_members") >= 1:
                break
            time.sleep(0.02)
        for client in (http, rpc):
            for change, field in (({"step": 5}, "step"), ({"prompt_key": "other"}, "prompt_key")):
                with pytest.raises(PreconditionFailed) as e:
                    client.submit_member(MemberSubmission(**{**open_[1].__dict__, **change}))
                assert e.value.field == field and e.value.http_status == 409
        assert rpc.submit_member(open_[1]).complete
        assert held.result(60).complete


def test_members_carry_quality_on_both_transports(replicas: list[BackgroundService]) -> None:
    """Issue 49: `quality` travels with each member over HTTP and gRPC (one group split across
    replicas and transports): every member gets /v1/reweight's answer for the group with its
    quality; a member without quality in a group that gives it is a 409 naming quality, a
    non-finite one a 422 naming it, on both transports."""
    gid = f"quality-{uuid.uuid4().hex}"
    rows = [(1.0, 1.0, [1.0, 0.0]), (1.0, 1.0, [1.0, 0.0]), (1.0, 1.0, [1.0, 0.0]),
            (0.0, 1.0, [0.0, 1.0])]  # quality, format, vector: three right copies, one wrong
    members = [
        MemberSubmission(gid, f"m{i}", len(rows), q + f, embedding=v, method="dra", quality=q,
                         timeout_s=60)
        for i, (q, f, v) in enumerate(rows)
    ]  # fmt: skip
    with (
        ReweighterClient(replicas[0].http_url, api_key=KEY, retry=NO_RETRY) as http,
        GrpcReweighterClient(replicas[1].grpc_target, api_key=KEY, retry=NO_RETRY) as rpc,
        ThreadPoolExecutor(4) as pool,
    ):
        futures = [
            pool.submit((http if i % 2 else rpc).submit_member, m)
            for i, m in enumerate(members[:3])
        ]
        for _ in range(1000):  # up to 20 s: a loaded machine
            waiting = sum(
                metric(r.http_url, "reweighter_assembly_waiting_members") for r in replicas
            )
            if waiting >= 3:
                break
            time.sleep(0.02)
        for client in (http, rpc):
            with pytest.raises(PreconditionFailed) as e:
                client.submit_member(MemberSubmission(**{**members[3].__dict__, "quality": None}))
            assert (e.value.field, e.value.http_status) == ("quality", 409)
            with pytest.raises(InvalidInput) as e:
                client.submit_member(
                    MemberSubmission(**{**members[3].__dict__, "quality": float("inf")})
                )
            assert (e.value.field, e.value.grpc_code) == ("quality", "INVALID_ARGUMENT")
        futures.append(pool.submit(http.submit_member, members[3]))
        results = [f.result(timeout=120) for f in futures]
        group = Group([q + f for q, f, _ in rows], embeddings=[v for _, _, v in rows],
                      quality=[q for q, _, _ in rows])  # fmt: skip
        want = http.reweight(ReweightRequest([group], "dra")).groups[0].rewards
    assert all(r.complete for r in results)
    assert [r.reward for r in results] == pytest.approx(want, abs=1e-6)
    # by hand: the right copies 1/3 + 1 (format added back), the wrong one 0 + 1
    assert want == pytest.approx([1 / 3 + 1] * 3 + [1.0], abs=1e-5)
