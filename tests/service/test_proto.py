"""proto/ is the complete gRPC contract: the stubs are fresh, and a client compiled from the
.proto alone (not the package's stubs) calls the service; health and reflection answer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from reweighter.service import BackgroundService

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "reweighter" / "v1" / "reweighter.proto"


def test_committed_stubs_are_fresh() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_client_compiled_from_the_proto_alone(tmp_path: Path, service: BackgroundService) -> None:
    # Compile the way another project would: just the .proto file, into an empty directory.
    (tmp_path / "reweighter.proto").write_text(PROTO.read_text())
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    compiled = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{tmp_path}",
            f"-I{include}",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            "reweighter.proto",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compiled.returncode == 0, compiled.stderr
    script = textwrap.dedent(
        f"""
        import sys, math
        import grpc
        import reweighter_pb2 as pb, reweighter_pb2_grpc as pbg
        assert "reweighter.api" not in sys.modules  # not the package's stubs
        with grpc.insecure_channel("{service.grpc_target}") as channel:
            stub = pbg.ReweighterStub(channel)
            req = pb.ReweightRequest(method="dra", advantages="grpo")
            g = req.groups.add(id="g1", rewards=[1.0, 1.0, 1.0])
            g.embeddings.dim = 2
            g.embeddings.values.extend([1, 0, 1, 0, 0, 1])
            out = stub.Reweight(req, timeout=30)
            r = list(out.groups[0].rewards)
            assert out.groups[0].id == "g1" and not out.HasField("model")
            assert all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(r, [0.5, 0.5, 1.0])), r
            assert abs(out.groups[0].stats.mean_similarity - 1 / 3) < 1e-6
            assert len(out.groups[0].advantages) == 3
            req = pb.ReweightRequest(method="mmr")
            req.params.update({{"lambda": 0.5}})
            req.groups.add(rewards=[1.0, 0.0], completions=["a cat", "a dog"])
            out = stub.Reweight(req, timeout=30)
            assert getattr(out.groups[0].stats, "lambda") == 0.5 and out.model
            emb = stub.Embed(pb.EmbedRequest(inputs=["hello", "world"]), timeout=30)
            assert emb.dim == 384 and len(emb.embeddings) == 2 * 384
            info = stub.Info(pb.InfoRequest(), timeout=30)
            names = {{"dra", "mmr", "darling", "outcome_ucb", "none"}}
            assert info.ready and set(info.methods) == names
            try:
                stub.Reweight(pb.ReweightRequest(method="bogus", groups=[g]), timeout=30)
                raise SystemExit("no error")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e.code()
                assert e.details().startswith("method:"), e.details()
        print("ok")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr


def test_health_and_reflection(service: BackgroundService) -> None:
    with grpc.insecure_channel(service.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "reweighter.v1.Reweighter"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        reply = next(iter(stub.ServerReflectionInfo(iter([request]), timeout=10)))
        names = {s.name for s in reply.list_services_response.service}
        assert {"reweighter.v1.Reweighter", "grpc.health.v1.Health"} <= names
        # the full contract is discoverable, e.g. by grpcurl
        request = reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="reweighter.v1.Reweighter"
        )
        reply = next(iter(stub.ServerReflectionInfo(iter([request]), timeout=10)))
        assert reply.file_descriptor_response.file_descriptor_proto
