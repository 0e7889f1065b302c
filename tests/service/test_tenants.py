"""Issue 38: one service for many training jobs. Two tenants on one real service (both
transports; the assembly and memory stores in process and on Redis): same group ids and prompt
keys are isolated, unknown keys get 401, a tenant over its max_queued gets 429 while another
gets 200, /v1/info names the caller's tenant, a passed deadline is dropped and counted."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import loopback, no_retry

from reweighter.client import GrpcReweighterClient, ReweighterClient
from reweighter.errors import Overloaded, ReweighterError, Unauthenticated
from reweighter.service import BackgroundService
from reweighter.tenancy import digest
from reweighter.types import Group, ReweightRequest

KEYS = {"team-a": "key-team-a-0001", "team-b": "key-team-b-0002", "tiny": "key-tiny-00003"}
TOKENS = {"team-a": "url-token-team-a", "team-b": "url-token-team-b"}


def tenants_file(path: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "tenants": [
                    {"name": "team-a", "key": KEYS["team-a"], "weight": 2,
                     "openrlhf_token": TOKENS["team-a"]},
                    # a file that must not hold the secret: its digest
                    {"name": "team-b", "key_sha256": digest(KEYS["team-b"]),
                     "openrlhf_token_sha256": digest(TOKENS["team-b"])},
                    {"name": "tiny", "key": KEYS["tiny"], "max_queued": 1},
                ]
            }
        )
    )
    return path


@pytest.fixture(scope="module", params=["memory", "redis"])
def served(
    request: pytest.FixtureRequest, engine: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BackgroundService]:
    extra: dict[str, Any] = {}
    if request.param == "redis":
        url = request.getfixturevalue("shared_redis_url")
        p = f"test:tenants:{uuid.uuid4().hex}:"
        extra = {"redis_url": url, "assembly_prefix": f"{p}asm:", "memory_prefix": f"{p}mem:"}
    path = tenants_file(tmp_path_factory.mktemp("tenants") / "tenants.json")
    with BackgroundService(loopback(tenants=str(path), **extra), engine) as svc:
        svc.redis_prefix = extra.get("assembly_prefix")  # type: ignore[attr-defined]
        yield svc
    if extra:
        import redis

        client = redis.Redis.from_url(extra["redis_url"])
        keys = list(client.scan_iter(match=f"{p}*", count=1000))
        if keys:
            client.delete(*keys)


def clients(svc: BackgroundService, tenant: str) -> tuple[ReweighterClient, GrpcReweighterClient]:
    key = KEYS[tenant]
    return (
        ReweighterClient(svc.http_url, api_key=key, retry=no_retry()),
        GrpcReweighterClient(svc.grpc_target, api_key=key, retry=no_retry()),
    )


def test_unknown_or_missing_key_is_401_on_both_transports(served: BackgroundService) -> None:
    for key in ("not-a-tenant-key", None):
        with (
            ReweighterClient(served.http_url, api_key=key, retry=no_retry()) as c,
            pytest.raises(Unauthenticated),
        ):
            c.info()
        with (
            GrpcReweighterClient(served.grpc_target, api_key=key, retry=no_retry()) as g,
            pytest.raises(Unauthenticated),
        ):
            g.info()
    # health stays open
    assert httpx.get(f"{served.http_url}/healthz").status_code == 200


def test_info_names_the_callers_tenant(served: BackgroundService) -> None:
    for tenant in ("team-a", "team-b"):
        http, grpc_client = clients(served, tenant)
        with http, grpc_client:
            assert http.info()["tenant"] == tenant
            assert grpc_client.info()["tenant"] == tenant


def test_same_group_id_two_tenants_are_isolated(served: BackgroundService) -> None:
    """Both tenants assemble group "g" with members "m0", "m1" and different rewards: before
    tenants, the second job got 409 (already sent with a different reward)."""
    gid = f"g-{uuid.uuid4().hex[:8]}"
    a_http, a_grpc = clients(served, "team-a")
    b_http, b_grpc = clients(served, "team-b")

    async def tenant(http: Any, grpc_client: Any, rewards: list[float]) -> list[Any]:
        texts = ["the answer is 4", "we get 5 by adding"]
        return await asyncio.gather(
            http.submit_member_async(gid, "m0", 2, rewards[0], completion=texts[0], timeout_s=60),
            grpc_client.submit_member_async(
                gid, "m1", 2, rewards[1], completion=texts[1], timeout_s=60
            ),
        )

    async def both() -> tuple[list[Any], list[Any]]:
        a, b = await asyncio.gather(
            tenant(a_http, a_grpc, [1.0, 0.0]), tenant(b_http, b_grpc, [0.0, 1.0])
        )
        return a, b

    with a_http, a_grpc, b_http, b_grpc:
        a, b = asyncio.run(both())
    for answers, raw in ((a, [1.0, 0.0]), (b, [0.0, 1.0])):
        assert all(r.complete for r in answers), answers
        assert [r.raw_reward for r in answers] == raw
        assert {r.group_id for r in answers} == {gid}  # the id as the tenant named it
    if served.redis_prefix:  # Redis keys carry the tenant
        import redis

        client = redis.Redis.from_url(served.settings.redis_url)
        keys = [k.decode() for k in client.scan_iter(match=f"{served.redis_prefix}*")]
        assert any(f"team-a:{gid}" in k for k in keys), keys
        assert any(f"team-b:{gid}" in k for k in keys), keys


def test_openrlhf_rounds_of_one_prompt_are_per_tenant(served: BackgroundService) -> None:
    """Two OpenRLHF jobs (each named by its URL token) send the same prompt's 2 samples at
    once: each job's round is whole and its own (shared, 4 samples of n=2 would mix)."""
    prompt = f"What is 2 + 2? ({uuid.uuid4().hex[:6]}) "
    body = {"query": [prompt + "The answer is 4.", prompt + "It is 5."],
            "prompts": [prompt, prompt], "labels": ["4", "4"]}  # fmt: skip

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=served.http_url, timeout=60) as c:
            return await asyncio.gather(*(
                c.post(f"/v1/openrlhf/{TOKENS[t]}/reward?n=2", json=body) for t in TOKENS
            ))  # fmt: skip

    for answer in asyncio.run(run()):
        assert answer.status_code == 200, answer.text
        out = answer.json()
        assert out["scores"] == [1.0, 0.0]
        assert out["extra_logs"]["reweighted"] == [1.0, 1.0], out
    wrong = httpx.post(f"{served.http_url}/v1/openrlhf/not-a-token/reward?n=2", json=body)
    assert wrong.status_code == 401


def test_same_prompt_key_two_tenants_have_their_own_memory(served: BackgroundService) -> None:
    key = f"prompt-{uuid.uuid4().hex}"

    def req(step: int, answers: list[str]) -> ReweightRequest:
        n = len(answers)
        group = Group(
            [0.0] * n, embeddings=[[1.0, float(i)] for i in range(n)], answers=answers,
            prompt_key=key,
        )  # fmt: skip
        return ReweightRequest(
            groups=[group], method="outcome_ucb", params={"scale": 1.0, "baseline": None},
            step=step,
        )  # fmt: skip

    a_http, a_grpc = clients(served, "team-a")
    b_http, b_grpc = clients(served, "team-b")
    with a_http, a_grpc, b_http, b_grpc:
        assert a_http.reweight(req(1, ["a", "a"])).groups[0].rewards == [1.0, 1.0]
        # team-a sees its own step 1 ("a" twice) ...
        got = a_grpc.reweight(req(2, ["a", "b"])).groups[0].rewards
        assert got == pytest.approx([1 / math.sqrt(2), 1.0])
        # ... team-b, with the same prompt key, has seen nothing
        assert b_grpc.reweight(req(2, ["a", "a"])).groups[0].rewards == [1.0, 1.0]
        # ... and its own memory works as ever
        assert b_http.reweight(req(3, ["a", "b"])).groups[0].rewards == pytest.approx(got)


async def aembed(client: Any, texts: list[str]) -> Any:
    """A sync client's embed, awaitable here (it runs on the client's own loop)."""
    coro = client.aio.embed(texts)
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, client._loop))


def _flood_texts(n: int, tag: str) -> list[str]:
    return [f"{tag} {i} " + "a long completion about numbers " * 10 for i in range(n)]


def test_a_tenant_over_its_bound_gets_429_while_another_gets_200(
    served: BackgroundService,
) -> None:
    """tiny (max_queued 1) sends several requests at once: those beyond its one queued request
    are refused, naming the bound, on both transports; team-a meanwhile is answered."""
    tiny_http, tiny_grpc = clients(served, "tiny")
    a_http, _ = clients(served, "team-a")

    async def run() -> list[Any]:
        tag = uuid.uuid4().hex
        calls = [aembed(tiny_http, _flood_texts(48, f"{tag}h{i}")) for i in range(3)]
        calls += [aembed(tiny_grpc, _flood_texts(48, f"{tag}g{i}")) for i in range(3)]
        calls.append(aembed(a_http, [f"{tag} small one"]))
        return await asyncio.gather(*calls, return_exceptions=True)

    with tiny_http, tiny_grpc, a_http:
        results = asyncio.run(run())
    tiny, other = results[:-1], results[-1]
    refused = [r for r in tiny if isinstance(r, Overloaded)]
    assert refused, tiny
    assert all("max_queued" in str(r) and "tiny" in str(r) for r in refused)
    assert any(not isinstance(r, BaseException) for r in tiny)  # its queued one was served
    assert not isinstance(other, BaseException), other
    assert len(other.embeddings) == 1


def test_a_passed_http_deadline_is_dropped_and_counted(served: BackgroundService) -> None:
    """x-request-timeout: a request still queued when it passes is answered 504 unserved (1 ms
    passes before the batcher's worker first plans it, with or without other work)."""
    key = KEYS["team-a"]
    tag = uuid.uuid4().hex
    headers = {"authorization": f"Bearer {key}"}

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=served.http_url, timeout=60) as c:
            big = [c.post("/v1/embed", json={"inputs": _flood_texts(8, f"{tag}{i}")},
                          headers=headers) for i in range(3)]  # fmt: skip
            late = c.post(
                "/v1/embed", json={"inputs": _flood_texts(8, f"{tag}late")},
                headers={**headers, "x-request-timeout": "0.001"},
            )  # fmt: skip
            return await asyncio.gather(*big, late)

    before = _dropped(served)
    answers = asyncio.run(run())
    assert [r.status_code for r in answers[:3]] == [200, 200, 200]
    late = answers[3]
    assert late.status_code == 504, late.text
    assert late.json()["error"]["type"] == "DeadlineExceeded"
    assert _dropped(served) >= before + 1
    bad = httpx.post(
        f"{served.http_url}/v1/embed", json={"inputs": ["x"]},
        headers={**headers, "x-request-timeout": "soon"},
    )  # fmt: skip
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "x-request-timeout"


def test_a_passed_grpc_deadline_is_dropped_and_counted(
    served: BackgroundService, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batcher is held: its worker waits inside team-a's round (a hook around the round) until
    the test lets it go. team-b's gRPC call (a 3 s deadline) is queued behind it, its deadline
    passes (the client gets DEADLINE_EXCEEDED), and only then is the worker let go: the call is
    dropped before it is computed (its text never reaches a round) and counted once. Bounded:
    every wait has a limit; the one clock the test races is the call's own 3 s deadline against
    the server registering it (milliseconds)."""
    batcher = engine.embedder.batcher
    tag = uuid.uuid4().hex
    blocker, late = f"{tag} hold the worker", f"{tag} too late"
    entered, release = threading.Event(), threading.Event()
    computed: list[str] = []
    serve = batcher._serve

    def held(round_: Any) -> None:
        texts = [r.job.text for s in round_ for r in s.ranges]
        computed.extend(texts)
        if blocker in texts:
            entered.set()
            release.wait(60)
        serve(round_)

    monkeypatch.setattr(batcher, "_serve", held)
    a_http, _ = clients(served, "team-a")
    b_grpc = GrpcReweighterClient(
        served.grpc_target, api_key=KEYS["team-b"], retry=no_retry(), timeout=3.0
    )
    before = _dropped(served)
    with a_http, b_grpc, ThreadPoolExecutor(1) as pool:
        first = pool.submit(a_http.embed, [blocker])
        try:
            assert entered.wait(60), "team-a's round never started"
            with pytest.raises(ReweighterError) as caught:
                b_grpc.embed([late])
            assert caught.value.grpc_code == "DEADLINE_EXCEEDED"
        finally:
            release.set()
        assert len(first.result(60).embeddings) == 1
    for _ in range(600):  # the worker has finished the held round and dropped the late call
        if batcher.pending == 0:
            break
        time.sleep(0.05)
    assert batcher.pending == 0
    assert late not in computed
    assert _dropped(served) == before + 1


def test_cache_hits_are_counted_per_tenant(served: BackgroundService) -> None:
    text = f"a shared text {uuid.uuid4().hex}"
    a_http, _ = clients(served, "team-a")
    b_http, _ = clients(served, "team-b")

    def hits(tenant: str) -> float:
        for line in httpx.get(f"{served.http_url}/metrics").text.splitlines():
            if line.startswith(f'reweighter_tenant_cache_hits_total{{tenant="{tenant}"}}'):
                return float(line.split()[1])
        raise AssertionError("reweighter_tenant_cache_hits_total not exported")

    before_a, before_b = hits("team-a"), hits("team-b")
    with a_http, b_http:
        a_http.embed([text])  # computed, cached
        b_http.embed([text])  # the same vector from the shared cache: team-b's hit
    assert hits("team-b") == before_b + 1 and hits("team-a") == before_a


def _dropped(svc: BackgroundService) -> float:
    text = httpx.get(f"{svc.http_url}/metrics").text
    for line in text.splitlines():
        if line.startswith("reweighter_requests_dropped_total "):
            return float(line.split()[1])
    raise AssertionError("reweighter_requests_dropped_total not exported")


def test_per_tenant_metrics_are_labelled_by_the_file(served: BackgroundService) -> None:
    a_http, _ = clients(served, "team-a")
    with a_http:
        a_http.embed(["metrics by tenant"])
    text = httpx.get(f"{served.http_url}/metrics").text
    assert 'reweighter_tenant_requests_total{endpoint="embed",status="ok",tenant="team-a",' \
        'transport="http"}' in text or 'tenant="team-a"' in text
    assert 'reweighter_tenant_queue_depth{tenant="tiny"}' in text
    # a tenant label never comes from the client: only the file's names appear
    names = {
        part.split('"')[1]
        for line in text.splitlines()
        if not line.startswith("#")
        for part in line.split(",")
        if part.startswith('tenant="') or part.startswith('{tenant="')
        for part in [part.lstrip("{")]
    }
    assert names <= {"team-a", "team-b", "tiny"}, names


# -- docs/operations.md, "One pool for many jobs": every block as written ---------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _block(tag: str) -> str:
    text = DOC.read_text()
    return text.split(f"```yaml {tag}\n", 1)[1].split("```", 1)[0]


def test_the_documented_tenants_file_compose_and_k8s_blocks_load() -> None:
    import yaml

    from reweighter.tenancy import parse_tenants

    table = parse_tenants(_block("tenants"), "docs")
    assert table.names == ["team-a", "team-b", "openrlhf-job"]
    a = table.by_name("team-a")
    assert a is not None and a.weight == 2 and a.max_queued == 256
    assert table.resolve_bearer("Bearer change-me-team-a").name == "team-a"
    tok = table.resolve_token("change-me-url-token")
    assert tok is not None and tok.name == "openrlhf-job"
    compose = yaml.safe_load(_block("compose"))["services"]["reweighter"]
    path = compose["environment"]["REWEIGHTER_TENANTS"]
    assert any(v.split(":")[1] == path for v in compose["volumes"])
    secret, deployment, hpa = yaml.safe_load_all(_block("k8s"))
    assert secret["kind"] == "Secret" and deployment["kind"] == "Deployment"
    files = secret["stringData"]
    assert parse_tenants(files["tenants.yaml"]).names == ["team-a", "team-b"]
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    mount = pod["containers"][0]["volumeMounts"][0]["mountPath"]
    assert env["REWEIGHTER_TENANTS"] == f"{mount}/tenants.yaml"
    assert pod["volumes"][0]["secret"]["secretName"] == secret["metadata"]["name"]
    assert hpa["kind"] == "HorizontalPodAutoscaler"
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "reweighter_queue_depth"


def test_every_metric_the_section_names_is_exported(served: BackgroundService) -> None:
    import re

    a_http, _ = clients(served, "team-a")
    collapsed = ReweightRequest(
        groups=[Group([1.0, 0.0, 1.0], embeddings=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
                      answers=["4", "4", "4"])],  # fmt: skip
        method="dra",
    )
    ones = re.compile(
        r'^reweighter_tenant_group_distinct_answers_bucket\{le="1\.0",tenant="team-a"\} (\S+)',
        re.M,
    )

    def collapsed_groups(text: str) -> float:
        m = ones.search(text)
        return float(m[1]) if m else 0.0

    before = collapsed_groups(httpx.get(f"{served.http_url}/metrics").text)
    with a_http:
        a_http.reweight(collapsed)
    text = httpx.get(f"{served.http_url}/metrics").text
    section = DOC.read_text().split("## One pool for many jobs", 1)[1]
    named = set(re.findall(r"`(reweighter_[a-z_]+)`", section))
    assert "reweighter_tenant_queue_depth" in named
    for name in named:
        if name.endswith("_group_"):
            continue
        assert re.search(rf"^{name}(_bucket|_total)?[{{ ]", text, re.M), name
    # the per-tenant collapse rule's series, for the tenant that sent the collapsed group
    assert collapsed_groups(text) == before + 1
    import yaml

    block = DOC.read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    rule = yaml.safe_load(block)["groups"][0]["rules"][1]
    assert "sum by (tenant, le)" in rule["expr"] and "{{ $labels.tenant }}" in str(rule)
