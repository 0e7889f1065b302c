"""A step whose groups run out of their members' wait is answered with raw rewards; the service
says so where an operator looks: one WARNING per step naming the setting (assembly_timeout_s,
its variable and flag), and `reweighter_assembly_raw_groups_total{reason}` counting every such
group once. Through `reweighter serve` itself (its log and /metrics), members over HTTP and gRPC;
the `computing` reason (a whole group not reweighted in time) on the assembler, where another
replica's claim holds the compute."""

from __future__ import annotations

import asyncio
import logging
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import no_retry

from reweighter.assembly import GroupAssembler, MemberSubmission
from reweighter.client import GrpcReweighterClient, ReweighterClient
from reweighter.launch import serve

from .conftest import Build

RAW = "reweighter_assembly_raw_groups_total"


def _counter(url: str, reason: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f'{RAW}{{reason="{reason}"}} '):
            return float(line.split()[-1])
    raise AssertionError(f"{RAW}{{reason={reason!r}}} not in /metrics")


def _warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if "answered with raw rewards" in line]


@pytest.mark.server
def test_a_steps_raw_groups_are_logged_once_naming_the_setting_and_counted() -> None:
    with serve("--assembly-timeout-s", "1.5") as served:
        assert _counter(served.url, "short") == 0
        with (
            ReweighterClient(served.url, retry=no_retry()) as http,
            GrpcReweighterClient(served.target, retry=no_retry()) as grpc_client,
            ThreadPoolExecutor(4) as pool,
        ):

            def member(client, gid: str, mid: str, size: int, step: int):  # type: ignore[no-untyped-def]
                return pool.submit(
                    client.submit_member, gid, mid, size, float(mid == "a"),
                    embedding=[1.0, float(ord(mid))], step=step,
                )  # fmt: skip

            # step 7: two groups short (2 of 4 over HTTP, 1 of 3 over gRPC), no timeout_s sent:
            # each waits the service's assembly_timeout_s
            short = [member(http, "g7-a", "a", 4, 7), member(http, "g7-a", "b", 4, 7),
                     member(grpc_client, "g7-b", "a", 3, 7)]  # fmt: skip
            answers = [f.result(timeout=60) for f in short]
            assert [(r.complete, r.reason) for r in answers] == [(False, "short")] * 3
            assert _counter(served.url, "short") == 2  # groups, not members
            # a whole group of step 8 is reweighted: nothing logged, nothing counted
            whole = [member(http, "g8-w", mid, 2, 8) for mid in "ab"]
            assert all(f.result(timeout=60).complete for f in whole)
            # step 9: one more short group, one more warning
            assert not member(grpc_client, "g9-a", "a", 2, 9).result(timeout=60).complete
        assert _counter(served.url, "short") == 3
        assert _counter(served.url, "computing") == 0
        warned = _warnings(served.log())
    assert len(warned) == 2, warned  # one per step, not one per group or member
    first, second = warned
    assert "WARNING" in first and "step 7 of tenant" in first
    assert re.search(r"only (2 of its 4|1 of its 3) members came within their wait of 1.5 s", first)
    for name in ("assembly_timeout_s", "REWEIGHTER_ASSEMBLY_TIMEOUT_S", "--assembly-timeout-s",
                 "now 1.5 s", RAW):  # fmt: skip
        assert name in first, name
    assert "step 9 of tenant" in second and "'g9-a'" in second


async def test_a_whole_group_not_reweighted_in_time_is_counted_computing(
    build: Build, caplog: pytest.LogCaptureFixture
) -> None:
    """Another replica holds the compute claim: at the deadline the group is answered raw
    ("computing"): counted once, logged once for its step; no step sent, a second such group
    within the minute is counted and not logged."""
    asm: GroupAssembler = build()
    await asm.start()
    caplog.set_level(logging.WARNING, logger="reweighter.assembly.round")
    for gid in ("busy-1", "busy-2"):
        assert await asm.store.claim(gid, "another replica", 30.0)
        subs = [
            MemberSubmission(gid, mid, 2, float(i), embedding=[1.0, float(i)], method="none",
                             timeout_s=0.5)
            for i, mid in enumerate("xy")
        ]  # fmt: skip
        got = await asyncio.gather(*(asm.submit(s) for s in subs))
        assert all((r.complete, r.reason) == (False, "computing") for r in got)
    assert asm.stats.raw_groups == {"short": 0, "computing": 2}
    warned = [r.getMessage() for r in caplog.records if "raw rewards" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "the members send no step" in warned[0]
    assert "its 2 members all came but it was not reweighted within their wait" in warned[0]
    assert "assembly_timeout_s" in warned[0]
