"""deploy/k8s: every overlay renders with kustomize, every object validates against the pinned
Kubernetes version's schemas, and the objects are wired to each other and to the images."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from deploy_support import INSTALL_HINT, K8S_VERSION, OVERLAYS, REPO, kubectl_command, kustomize

Objects = list[dict[str, Any]]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request) -> tuple[str, Objects]:
    if kubectl_command() is None:
        pytest.skip(f"kubectl not found: {INSTALL_HINT}")
    return request.param, kustomize(request.param)


@pytest.fixture(scope="module")
def rendered() -> dict[str, Objects]:
    if kubectl_command() is None:
        pytest.skip(f"kubectl not found: {INSTALL_HINT}")
    return {name: kustomize(name) for name in OVERLAYS}


def get(objs: Objects, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec(obj)["containers"] if c["name"] == name)


def test_every_object_validates_against_the_pinned_schemas(overlay) -> None:
    name, objs = overlay
    errors = []
    for obj in objs:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {e.message}")
    assert not errors, f"overlay {name}:\n" + "\n".join(errors)


def test_the_validator_rejects_a_bad_object(rendered) -> None:
    """The check above can fail: a misspelt field and a wrong type are refused."""
    deploy = yaml.safe_load(yaml.safe_dump(get(rendered["cpu"], "Deployment", "reweighter")))
    deploy["spec"]["replica"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deploy, K8S_VERSION, strict=True)
    deploy = yaml.safe_load(yaml.safe_dump(get(rendered["cpu"], "Deployment", "reweighter")))
    container(deploy, "reweighter")["ports"][0]["containerPort"] = "eighty"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deploy, K8S_VERSION, strict=True)


def test_everything_lands_in_one_namespace(overlay) -> None:
    _, objs = overlay
    namespaced = [o for o in objs if o["kind"] != "Namespace"]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"reweighter"}


def test_reweighter_service_exposes_http_and_grpc(overlay) -> None:
    _, objs = overlay
    svc = get(objs, "Service", "reweighter")
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert (ports["http"]["port"], ports["grpc"]["port"]) == (8080, 50051)
    deploy = get(objs, "Deployment", "reweighter")
    c = container(deploy, "reweighter")
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named == {"http": 8080, "grpc": 50051}
    assert {p["targetPort"] for p in ports.values()} == set(named)
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()


def test_reweighter_probes_config_and_secret(overlay) -> None:
    _, objs = overlay
    deploy = get(objs, "Deployment", "reweighter")
    c = container(deploy, "reweighter")
    assert c["args"] == ["serve"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    config_name = c["envFrom"][0]["configMapRef"]["name"]
    config = get(objs, "ConfigMap", config_name)["data"]
    assert config["REWEIGHTER_HOST"] == "0.0.0.0"
    assert (config["REWEIGHTER_HTTP_PORT"], config["REWEIGHTER_GRPC_PORT"]) == ("8080", "50051")
    (key,) = [e for e in c["env"] if e["name"] == "REWEIGHTER_API_KEY"]
    ref = key["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "reweighter-api-key" and ref["key"] == "REWEIGHTER_API_KEY"
    # The key lives in a Secret the operator creates: none is committed with a value. The pool's
    # tenants Secret holds key digests only (placeholders no key matches: test_deploy_pool.py).
    secrets = [o for o in objs if o["kind"] == "Secret"]
    assert [s["metadata"]["name"] for s in secrets] in ([], ["reweighter-tenants"])
    assert all("key:" not in yaml.safe_dump(s) for s in secrets)
    sec = pod_spec(deploy)["securityContext"]
    assert sec["runAsNonRoot"] is True and sec["runAsUser"] != 0


def test_every_container_requests_resources(overlay) -> None:
    _, objs = overlay
    for obj in objs:
        if obj["kind"] not in ("Deployment", "Job"):
            continue
        spec = pod_spec(obj)
        for c in spec.get("initContainers", []) + spec["containers"]:
            requests = c.get("resources", {}).get("requests", {})
            assert {"cpu", "memory"} <= set(requests), f"{obj['metadata']['name']}/{c['name']}"


def test_hpa_and_pdb_cover_the_reweighter(overlay) -> None:
    _, objs = overlay
    deploy = get(objs, "Deployment", "reweighter")
    hpa = get(objs, "HorizontalPodAutoscaler", "reweighter")
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", "reweighter")
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    pdb = get(objs, "PodDisruptionBudget", "reweighter")
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # A node drain can always proceed: more replicas than the budget keeps.
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"]
    # HPA's CPU utilisation needs a CPU request to be a percentage of.
    assert container(deploy, "reweighter")["resources"]["requests"]["cpu"]


def test_metrics_are_scrapable(overlay) -> None:
    _, objs = overlay
    deploy = get(objs, "Deployment", "reweighter")
    ann = deploy["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert ann["prometheus.io/path"] == "/metrics"
    http = next(p for p in container(deploy, "reweighter")["ports"] if p["name"] == "http")
    assert ann["prometheus.io/port"] == str(http["containerPort"])
    prom = yaml.safe_load((REPO / "deploy/monitoring/prometheus-kubernetes.yml").read_text())
    (job,) = prom["scrape_configs"]
    sources = {s for r in job["relabel_configs"] for s in r["source_labels"]}
    for key in ("scrape", "path", "port"):
        assert f"__meta_kubernetes_pod_annotation_prometheus_io_{key}" in sources
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["reweighter"]


def test_urls_point_at_services_that_exist(overlay) -> None:
    """Every host:port the pods are given (config maps, args, init scripts) is a Service port
    of this render."""
    _, objs = overlay
    services = {
        o["metadata"]["name"]: {p["port"] for p in o["spec"]["ports"]}
        for o in objs
        if o["kind"] == "Service"
    }
    text = yaml.safe_dump([o for o in objs if o["kind"] in ("ConfigMap", "Deployment", "Job")])
    urls = set(re.findall(r"\b(?:redis|https?)://[\w.-]+:\d+", text))
    assert urls, "no service URLs found"
    for url in urls:
        parsed = urlparse(url)
        assert parsed.port in services.get(parsed.hostname, set()), url


def test_trainer_job_waits_for_the_service(overlay) -> None:
    name, objs = overlay
    if name == "pool":
        assert not [o for o in objs if o["kind"] == "Job"], "the pool runs no trainer"
        return
    job = get(objs, "Job", "trainer")
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    (init,) = spec["initContainers"]
    assert "http://reweighter:8080/readyz" in init["command"][-1]
    args = container(job, "trainer")["args"]
    assert "reweighter.url=http://reweighter:8080" in args
    config = args[args.index("--config") + 1]
    assert (REPO / config).is_file(), f"{config} does not exist"
    key = next(e for e in container(job, "trainer")["env"] if e["name"] == "REWEIGHTER_API_KEY")
    assert key["valueFrom"]["secretKeyRef"]["optional"] is True
    assert "reweighter.api_key=$(REWEIGHTER_API_KEY)" in args


def test_cpu_overlay_needs_no_gpu(rendered) -> None:
    objs = rendered["cpu"]
    assert "nvidia.com/gpu" not in yaml.safe_dump(objs)
    assert not [o for o in objs if o["metadata"]["name"] == "rollout"]
    deploy = get(objs, "Deployment", "reweighter")
    config = get(
        objs, "ConfigMap", container(deploy, "reweighter")["envFrom"][0]["configMapRef"]["name"]
    )
    assert config["data"]["REWEIGHTER_DEVICE"] == "cpu"
    images = {
        c["image"]
        for o in objs
        if o["kind"] in ("Deployment", "Job")
        for c in pod_spec(o)["containers"] + pod_spec(o).get("initContainers", [])
    }
    assert images == {"redis:7.4.2-alpine", "reweighter:0.1.0-cpu", "reweighter-trainer:0.1.0-cpu"}
    args = container(get(objs, "Job", "trainer"), "trainer")["args"]
    assert args[:2] == ["--config", "trainer/configs/smoke-cpu.yaml"]


def test_gpu_overlay_places_gpus_and_the_rollout_server(rendered) -> None:
    objs = rendered["gpu"]
    for kind, name, cname in [
        ("Deployment", "reweighter", "reweighter"),
        ("Deployment", "rollout", "rollout"),
        ("Job", "trainer", "trainer"),
    ]:
        res = container(get(objs, kind, name), cname)["resources"]
        assert res["limits"]["nvidia.com/gpu"] == "1", name
    rollout = get(objs, "Deployment", "rollout")
    c = container(rollout, "rollout")
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/"
    assert {p["containerPort"] for p in c["ports"]} == {8000}
    # TRL's weight sync: the trainer is rank 0 and the vLLM workers connect to its group port.
    trainer = container(get(objs, "Job", "trainer"), "trainer")
    assert {p["containerPort"] for p in trainer["ports"]} == {51216}
    config = get(objs, "ConfigMap", c["envFrom"][0]["configMapRef"]["name"])["data"]
    assert {
        "MODEL",
        "TENSOR_PARALLEL_SIZE",
        "DATA_PARALLEL_SIZE",
        "GPU_MEMORY_UTILIZATION",
        "MAX_MODEL_LEN",
        "HOST",
        "PORT",
    } <= set(config)
    assert config["PORT"] == "8000"
    args = container(get(objs, "Job", "trainer"), "trainer")["args"]
    assert "vllm_server_base_url=http://rollout:8000" in args
    assert "use_vllm=true" in args and "vllm_mode=server" in args
    model_arg = next(a for a in args if a.startswith("model.name_or_path="))
    assert model_arg.split("=", 1)[1] == config["MODEL"], "trainer and rollout serve one policy"
    deploy = get(objs, "Deployment", "reweighter")
    reweighter_config = get(
        objs, "ConfigMap", container(deploy, "reweighter")["envFrom"][0]["configMapRef"]["name"]
    )
    assert reweighter_config["data"]["REWEIGHTER_DEVICE"] == "cuda"
    job_volumes = {v["name"]: v for v in pod_spec(get(objs, "Job", "trainer"))["volumes"]}
    assert job_volumes["checkpoints"] == {
        "name": "checkpoints",
        "persistentVolumeClaim": {"claimName": "checkpoints"},
    }
    get(objs, "PersistentVolumeClaim", "checkpoints")
