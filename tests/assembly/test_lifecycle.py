"""Assembly lifecycle on a real service on loopback: abandoned groups release the open-group
bound at their own timeout_s, the store's fill is on /metrics; HTTP and gRPC give identical
member answers (complete, short, retried, next round)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from reweighter.assembly import MemberReason, MemberResult, MemberSubmission
from reweighter.client import (
    AsyncGrpcReweighterClient,
    GrpcReweighterClient,
    RetryPolicy,
    ReweighterClient,
)
from reweighter.engine import ReweightEngine
from reweighter.server import BackgroundService

from .conftest import settings

NO_RETRY = RetryPolicy(retries=0)
DOCS = Path(__file__).resolve().parents[2] / "docs"


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.slow
async def test_abandoned_groups_release_the_bound_at_their_own_timeout(
    engine: ReweightEngine,
) -> None:
    """Issue 21 item 7: 20,000 members of groups that never complete (a crashed trainer, each
    group of 8 got one member), timeout_s 2, at the default bounds (16384 open groups). A new
    group of 3 then completes within 15 s of the flood's end, and the store-fill gauge showed
    the flood while it lasted and is back to zero after."""
    flood, fill = 20_000, "reweighter_assembly_store_groups"
    with BackgroundService(settings(), engine) as svc:
        peak, taken_in = 0.0, []  # (time, members accepted so far)
        done = threading.Event()

        def scrape() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, metric(svc.http_url, fill))
                accepted = metric(svc.http_url, "reweighter_assembly_members_total")
                taken_in.append((time.monotonic(), accepted))
                done.wait(0.25)

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        members = (
            MemberSubmission(f"crashed-{i}", "0", 8, 1.0, embedding=[1.0, 0.5], timeout_s=2)
            for i in range(flood)
        )
        start = time.monotonic()
        async with AsyncGrpcReweighterClient(svc.grpc_target, retry=NO_RETRY) as rpc:
            answers = [a async for a in rpc.submit_members(members)]
        done.set()
        scraper.join(5)
        assert len(answers) == flood
        results = [a for a in answers if isinstance(a, MemberResult)]
        assert len(results) > flood // 2  # the rest: 429 while the bound was full
        assert all(
            (r.complete, r.reason, r.members) == (False, MemberReason.SHORT, 1) for r in results
        )
        assert peak >= 500, peak  # the flood was visible on /metrics
        # the flood ends when the service has taken in its last member (a loaded machine
        # reads the stream later than the client writes it)
        flood_end = next(t for t, n in taken_in if n >= len(results))

        group = [
            MemberSubmission("after-flood", str(i), 3, float(i), embedding=[1.0, i], timeout_s=10)
            for i in range(3)
        ]
        with ReweighterClient(svc.http_url, retry=NO_RETRY) as http:
            loop = asyncio.get_running_loop()
            fresh = await asyncio.gather(
                *(
                    loop.run_in_executor(
                        None,
                        lambda m=m: http.submit_member(
                            m.group_id, m.member_id, 3, m.reward, embedding=m.embedding,
                            timeout_s=m.timeout_s,
                        ),  # fmt: skip
                    )
                    for m in group
                )
            )
        assert all(r.complete and r.members == 3 for r in fresh)
        assert time.monotonic() - flood_end < 15, "the new group waited for the flood to expire"
        for _ in range(30):  # the gauge is read every second
            if metric(svc.http_url, fill) == 0:
                break
            await asyncio.sleep(0.2)
        assert metric(svc.http_url, fill) == 0
        assert metric(svc.http_url, "reweighter_assembly_store_groups_max") == 16384
        print(f"flood of {flood} taken in {flood_end - start:.1f} s, fill peak {peak:.0f}")


def test_http_and_grpc_give_identical_member_answers(engine: ReweightEngine) -> None:
    """The same members over either transport get the same answers, field for field: a
    complete group, a short round, retries across transports, a member in the next round."""
    with (
        BackgroundService(settings(), engine) as svc,
        ReweighterClient(svc.http_url, retry=NO_RETRY) as http,
        GrpcReweighterClient(svc.grpc_target, retry=NO_RETRY) as rpc,
    ):

        def send(client, m: MemberSubmission) -> MemberResult:
            return client.submit_member(
                m.group_id, m.member_id, m.group_size, m.reward, completion=m.completion,
                embedding=m.embedding, method=m.method, advantages=m.advantages,
                timeout_s=m.timeout_s,
            )  # fmt: skip

        full = [
            MemberSubmission("p/full", mid, 2, r, completion=t, advantages="grpo", method="mmr")
            for mid, r, t in (("a", 1.0, "x = 4"), ("b", 0.0, "the answer is 5"))
        ]
        pairs = zip((http, rpc), full, strict=True)
        threads = [threading.Thread(target=send, args=pair) for pair in pairs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        short = MemberSubmission("p/short", "a", 3, 1.0, embedding=[1.0, 0.0],
                                 advantages="grpo", timeout_s=0.5)  # fmt: skip
        first = send(http, short)
        assert (first.complete, first.reason, first.members) == (False, "short", 1)
        late = MemberSubmission("p/short", "b", 3, 0.0, embedding=[0.0, 1.0], timeout_s=0.5)
        for m in (*full, short, late):
            a, b = send(http, m), send(rpc, m)
            assert a == b, (a, b)
            assert isinstance(a.reason, MemberReason | None)
            assert isinstance(b.reason, MemberReason | None)
        assert send(rpc, late).round == 1
        raw = httpx.post(
            f"{svc.http_url}/v1/groups/p%2Fshort/members",
            json={"member_id": "a", "group_size": 3, "reward": 1.0, "embedding": [1.0, 0.0],
                  "advantages": "grpo", "timeout_s": 0.5},
        ).json()  # fmt: skip
        assert (raw["reason"], raw["round"], raw["members"]) == ("short", 0, 1)
        # every assembly metric the docs name is on /metrics (with its _total when a counter)
        exported = {
            line.split("{")[0].split()[0]
            for line in httpx.get(f"{svc.http_url}/metrics").text.splitlines()
            if line.startswith("reweighter_assembly_")
        }
        named = set()
        for doc in ("operations.md", "integrations.md"):
            named |= set(re.findall(r"reweighter_assembly_[a-z_]+", (DOCS / doc).read_text()))
        assert named and named <= exported, named - exported


def test_the_documented_member_request_and_answer_are_the_wire_format() -> None:
    """docs/integrations.md's JSON examples of the contract: each request is a valid member
    (wire model and check_member), the answer has exactly the wire model's fields."""
    import json

    from reweighter.engine.checks import check_member
    from reweighter.limits import Limits
    from reweighter.wire.http import MemberIn, MemberOut, to_engine

    text = (DOCS / "integrations.md").read_text()
    contract = text[text.index("### The contract") : text.index("**gRPC**")]
    # the first member's request, its sibling's, then the first member's answer
    *requests, answer = (json.loads(b) for b in re.findall(r"```json\n(.*?)```", contract, re.S))
    assert len(requests) == 2 and {r["member_id"] for r in requests} == {"3", "4"}
    request = requests[0]
    sub = to_engine(MemberIn.model_validate(request), group_id="uid-17")
    checked = check_member(sub, Limits.from_settings(settings()), default_timeout_s=300,
                           max_timeout_s=1800)  # fmt: skip
    assert checked.timeout_s == request["timeout_s"] and checked.completion is not None
    assert set(answer) == set(MemberOut.model_fields)
    out = to_engine(MemberOut.model_validate(answer))
    assert out.complete and out.reason is None and out.round == 0
