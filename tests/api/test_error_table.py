"""docs/service.md's table of errors is the code's: every error class of `reweighter.errors`
has one row, with its HTTP status, its gRPC code and whether the clients retry it, read from
the classes and the retry policy themselves; the trailing metadata keys it names are the ones
the gRPC transport writes; and a running service answers each error as its row says, on both
transports: the HTTP status and body type, the gRPC code and its `reweighter-error-type` and
`reweighter-error-field` metadata (the servicer's abort, the key check's and the decode
guard's)."""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from conftest import loopback

from reweighter import errors
from reweighter.client.retry import retryable
from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService
from reweighter.types import ReweightRequest, ReweightResult
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2 as pb
from reweighter.wire._proto.reweighter.v1 import reweighter_pb2_grpc as pb_grpc
from reweighter.wire.grpc import ERROR_FIELD_KEY, ERROR_TYPE_KEY

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"
ROW = re.compile(r"^\| `(\w+)` \| (\d{3})[^|]* \| `(\w+)`[^|]* \| (yes|no) \|", re.M)
KEY = "table-key"
RAISE = "raise:"
"""A group id `raise:<ErrorClass>` makes the engine below raise that error."""


GRPC_OWN = re.compile(r"^\| `([A-Z_]+)` \| none \|", re.M)
"""A row of the table of grpc's own answers (no reweighter-error-* metadata)."""


def rows() -> dict[str, tuple[int, str, bool]]:
    return {m[1]: (int(m[2]), m[3], m[4] == "yes") for m in ROW.finditer(DOC.read_text())}


def test_every_error_has_its_row_and_the_row_is_the_code() -> None:
    text = DOC.read_text()
    rows = {m[1]: (int(m[2]), m[3], m[4] == "yes") for m in ROW.finditer(text)}
    classes = {
        name: cls
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.ReweighterError) and cls is not errors.ReweighterError
    }
    assert set(rows) == set(classes), set(rows) ^ set(classes)
    for name, cls in classes.items():
        exc = cls("x")
        assert rows[name] == (exc.http_status, exc.grpc_code, retryable(exc)), name
    assert f"`{ERROR_TYPE_KEY}`" in text and f"`{ERROR_FIELD_KEY}`" in text


class RaisingEngine:
    """The real engine, except that a request whose first group's id is `raise:<ErrorClass>`
    raises that error (field "groups[0]") where the engine would compute: every error class
    reaches the transports' error path the way the engine's own do."""

    def __init__(self, engine: ReweightEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def areweight(self, request: ReweightRequest) -> ReweightResult:
        gid = request.groups[0].id if request.groups else None
        if gid and gid.startswith(RAISE):
            cls = getattr(errors, gid.removeprefix(RAISE))
            raise cls(f"raised as {cls.__name__}", field="groups[0]")
        return await self._engine.areweight(request)


@pytest.fixture(scope="module")
def raising(engine: ReweightEngine) -> Iterator[BackgroundService]:
    settings = loopback(api_key=KEY, max_chars=10_000, max_completions=8)  # a ~1.2 MB limit
    with BackgroundService(settings, RaisingEngine(engine)) as svc:  # type: ignore[arg-type]
        yield svc


def _grpc_error(target: str, msg: Any, key: str | None = KEY) -> grpc.RpcError:
    metadata = (("authorization", f"Bearer {key}"),) if key else ()
    with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError) as info:
        pb_grpc.ReweighterStub(channel).Reweight(msg, timeout=30, metadata=metadata)
    return info.value


def _metadata(e: grpc.RpcError) -> dict[str, str]:
    return {k: v for k, v in (e.trailing_metadata() or ()) if k.startswith("reweighter-error-")}


@pytest.mark.parametrize(
    "name",
    sorted(n for n in rows() if n != "ConnectionFailed"),  # client side: no server's
)
def test_the_service_answers_each_error_as_its_row(raising: BackgroundService, name: str) -> None:
    http, code, _ = rows()[name]
    group = {"id": RAISE + name, "rewards": [1.0, 0.0], "embeddings": [[1.0, 0.0], [0.0, 1.0]]}
    r = httpx.post(
        raising.http_url + "/v1/reweight",
        json={"groups": [group]},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert (r.status_code, r.json()["error"]["type"]) == (http, name), r.text
    msg = pb.ReweightRequest()
    g = msg.groups.add(id=RAISE + name, rewards=[1.0, 0.0])
    g.embeddings.dim = 2
    g.embeddings.values.extend([1.0, 0.0, 0.0, 1.0])
    e = _grpc_error(raising.grpc_target, msg)
    assert e.code().name == code, (name, e.code(), e.details())
    assert _metadata(e) == {ERROR_TYPE_KEY: name, ERROR_FIELD_KEY: "groups[0]"}


def test_the_edges_own_refusals_carry_their_metadata(raising: BackgroundService) -> None:
    """The refusals made before the servicer runs: the key check (no key) and the decode guard
    (bytes that are no message of the method) answer as their rows, type and all; an error
    without a field sends no field key."""
    e = _grpc_error(raising.grpc_target, pb.ReweightRequest(), key=None)
    assert e.code().name == rows()["Unauthenticated"][1]
    assert _metadata(e) == {ERROR_TYPE_KEY: "Unauthenticated"}
    raw = grpc.insecure_channel(raising.grpc_target)
    with raw as channel, pytest.raises(grpc.RpcError) as info:
        channel.unary_unary("/reweighter.v1.Reweighter/Reweight")(
            b"\xff\xff\xff\xff", timeout=30, metadata=(("authorization", f"Bearer {KEY}"),)
        )
    assert info.value.code().name == rows()["InvalidInput"][1], info.value.details()
    assert _metadata(info.value) == {ERROR_TYPE_KEY: "InvalidInput"}
    # and the engine's own check, unraised by the test: the field it names
    msg = pb.ReweightRequest()
    msg.groups.add(rewards=[1.0, float("nan")], completions=["a", "b"])
    e = _grpc_error(raising.grpc_target, msg)
    assert _metadata(e) == {ERROR_TYPE_KEY: "InvalidInput", ERROR_FIELD_KEY: "groups[0].rewards[1]"}


def test_grpcs_own_answers_carry_no_metadata(raising: BackgroundService) -> None:
    """The second table, each row made to happen: an unknown method, a message over the body
    limit, a deadline that passes; none carries a reweighter-error-* key."""
    codes = set(GRPC_OWN.findall(DOC.read_text()))
    auth = (("authorization", f"Bearer {KEY}"),)
    seen = {}
    with grpc.insecure_channel(raising.grpc_target) as channel:
        stub = pb_grpc.ReweighterStub(channel)
        calls = {
            "UNIMPLEMENTED": lambda: channel.unary_unary("/reweighter.v1.Reweighter/Nope")(
                b"", timeout=30, metadata=auth
            ),
            "RESOURCE_EXHAUSTED": lambda: stub.Reweight(
                pb.ReweightRequest(groups=[pb.Group(rewards=[1.0], completions=["x" * 3_000_000])]),
                timeout=30,
                metadata=auth,
            ),
            # a member alone in a group of two waits (its timeout_s: 3 s) past the caller's
            # 0.5 s: grpc ends the call. (A 1 us deadline on Reweight raced: now and then the
            # service's own DeadlineExceeded, with its metadata, arrived first.)
            "DEADLINE_EXCEEDED": lambda: stub.SubmitMember(
                pb.SubmitMemberRequest(
                    group_id=f"deadline-{os.getpid()}", member_id="0", group_size=2,
                    reward=1.0, embedding=pb.Vector(values=[1.0, 0.5]), timeout_s=3.0,
                ),
                timeout=0.5,
                metadata=auth,
            ),  # fmt: skip
        }
        for code, call in calls.items():
            with pytest.raises(grpc.RpcError) as info:
                call()
            seen[code] = (info.value.code().name, _metadata(info.value))
    assert codes == set(calls), codes
    assert seen == {code: (code, {}) for code in calls}
