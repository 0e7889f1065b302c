"""deploy/k8s/overlays/pool, one reweighter pool for many jobs: rendered by kustomize and
validated like every overlay (test_deploy_k8s.py); here what makes it a pool. No trainer Job; the
tenants file a Secret resource the service's own parser loads, mounted where REWEIGHTER_TENANTS
points; a GPU slice per replica (time-sliced, or MIG through mig.yaml, rendered and validated
too); replicas spread over nodes with a budget that lets a drain proceed; the HPA on the queue
depth that prometheus-adapter's rule serves from the series Prometheus scrapes; TLS for HTTP
and gRPC at the ingress, pointed at the Service's ports, with timeouts and a body size above
the service's own."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_support import INSTALL_HINT, K8S, K8S_VERSION, REPO, kubectl_command, kustomize

from reweighter.config import Settings
from reweighter.limits import max_body_bytes
from reweighter.tenancy import parse_tenants

POOL = K8S / "overlays" / "pool"
Objects = list[dict[str, Any]]


@pytest.fixture(scope="module")
def pool() -> Objects:
    if kubectl_command() is None:
        pytest.skip(f"kubectl not found: {INSTALL_HINT}")
    return kustomize("pool")


def one(objs: Objects, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def pod(objs: Objects) -> dict[str, Any]:
    return one(objs, "Deployment", "reweighter")["spec"]["template"]["spec"]


def test_the_pool_is_the_service_alone_with_its_tenants_file(pool: Objects) -> None:
    assert not [o for o in objs_of(pool, "Job")], "a pool runs no trainer"
    secret = one(pool, "Secret", "reweighter-tenants")
    table = parse_tenants(secret["stringData"]["tenants.yaml"], "the pool's Secret")
    assert table.names == ["team-a", "team-b"]
    assert all(table.by_name(n).max_queued in (None, 256) for n in table.names)
    spec = pod(pool)
    (c,) = spec["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "tenants"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "tenants"]
    assert volume["secret"]["secretName"] == "reweighter-tenants" and mount["readOnly"] is True
    config = one(pool, "ConfigMap", c["envFrom"][0]["configMapRef"]["name"])["data"]
    assert config["REWEIGHTER_TENANTS"] == f"{mount['mountPath']}/tenants.yaml"
    assert config["REWEIGHTER_DEVICE"] == "cuda"


def objs_of(objs: Objects, kind: str) -> Objects:
    return [o for o in objs if o["kind"] == kind]


def test_a_replica_takes_one_gpu_slice_and_replicas_spread_over_nodes(pool: Objects) -> None:
    spec = pod(pool)
    res = spec["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "1"
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    labels = one(pool, "Deployment", "reweighter")["spec"]["template"]["metadata"]["labels"]
    (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    hpa, pdb = (
        one(pool, "HorizontalPodAutoscaler", "reweighter"),
        one(pool, "PodDisruptionBudget", "reweighter"),
    )
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"] >= 1
    # time-slicing: the plugin's config advertises each GPU as `replicas` nvidia.com/gpu
    plugin = yaml.safe_load((POOL / "gpu-time-slicing.yaml").read_text())
    kubernetes_validate.validate(plugin, K8S_VERSION, strict=True)
    sharing = yaml.safe_load(plugin["data"]["any"])["sharing"]["timeSlicing"]
    (shared,) = sharing["resources"]
    assert shared["name"] == "nvidia.com/gpu" and shared["replicas"] > 1
    assert sharing["failRequestsGreaterThanOne"] is True  # "1" stays one slice


def test_the_mig_patch_renders_and_validates(tmp_path: Path, pool: Objects) -> None:
    """mig.yaml added to the overlay's patches: the request becomes one MIG slice, no whole GPU."""
    shutil.copytree(K8S, tmp_path / "k8s")
    mig = tmp_path / "k8s" / "overlays" / "pool-mig"
    mig.mkdir()
    shutil.copy(POOL / "mig.yaml", mig / "mig.yaml")
    (mig / "kustomization.yaml").write_text(
        "resources:\n  - ../pool\npatches:\n  - path: mig.yaml\n"
    )
    out = subprocess.run([kubectl_command(), "kustomize", str(mig)], capture_output=True,
                         text=True, timeout=120, check=True).stdout  # fmt: skip
    objs = [d for d in yaml.safe_load_all(out) if d]
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    res = pod(objs)["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in res["requests"] and "nvidia.com/gpu" not in res["limits"]
    assert res["requests"]["nvidia.com/mig-1g.18gb"] == res["limits"]["nvidia.com/mig-1g.18gb"]


def test_the_queue_depth_hpa_has_its_adapter_rule(pool: Objects) -> None:
    hpa = one(pool, "HorizontalPodAutoscaler", "reweighter")
    (pods,) = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    wanted = pods["metric"]["name"]
    adapter = yaml.safe_load((REPO / "deploy/monitoring/prometheus-adapter.yaml").read_text())
    (rule,) = [r for r in adapter["rules"] if r["name"]["as"] == wanted]
    assert rule["seriesQuery"].startswith(f"{wanted}{{")
    # the series carries the labels the rule maps to the pod: Prometheus' relabelling sets them
    overrides = rule["resources"]["overrides"]
    assert {v["resource"] for v in overrides.values()} == {"namespace", "pod"}
    prom = yaml.safe_load((REPO / "deploy/monitoring/prometheus-kubernetes.yml").read_text())
    targets = {r.get("target_label") for r in prom["scrape_configs"][0]["relabel_configs"]}
    assert set(overrides) <= targets
    assert "<<.Series>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]


def test_tls_at_the_ingress_for_both_transports(pool: Objects) -> None:
    service = one(pool, "Service", "reweighter")
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    settings = Settings()
    for name, port in (("reweighter-http", "http"), ("reweighter-grpc", "grpc")):
        ing = one(pool, "Ingress", name)
        (tls,) = ing["spec"]["tls"]
        (rule,) = ing["spec"]["rules"]
        assert tls["secretName"] == "reweighter-tls" and tls["hosts"] == [rule["host"]]
        (path,) = rule["http"]["paths"]
        backend = path["backend"]["service"]
        assert backend["name"] == "reweighter" and backend["port"]["name"] in ports
        assert backend["port"]["name"] == port
        ann = ing["metadata"]["annotations"]
        assert ann["nginx.ingress.kubernetes.io/ssl-redirect"] == "true"
        # a member may wait up to assembly_max_timeout_s; a body up to the service's own limit
        assert float(ann["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= (
            settings.assembly_max_timeout_s
        )
        size = ann["nginx.ingress.kubernetes.io/proxy-body-size"]
        assert size.endswith("m") and int(size[:-1]) * 2**20 >= max_body_bytes(settings)
    grpc = one(pool, "Ingress", "reweighter-grpc")["metadata"]["annotations"]
    assert grpc["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    assert ports["grpc"]["appProtocol"] == "kubernetes.io/h2c"


def test_the_pages_commands_as_written(pool: Objects) -> None:
    """docs/kubernetes.md's apply line renders exactly this overlay (the apply itself needs a
    cluster), and its digest line prints what the service compares keys with."""
    from reweighter.tenancy import digest

    page = (REPO / "docs" / "kubernetes.md").read_text()
    (line,) = page.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    render, apply = (part.strip() for part in line.split("|"))
    assert apply == "kubectl apply -f -"
    argv = [str(kubectl_command()), *render.split()[1:]]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert [d for d in yaml.safe_load_all(out.stdout) if d] == pool
    command = page.split("```text\n", 1)[1].split("```", 1)[0].split("#")[0].strip()
    key = "a-key-of-team-a-0123"
    done = subprocess.run(["bash", "-c", command], env={"TEAM_A_KEY": key, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.split()[0] == digest(key)
