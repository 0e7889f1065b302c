"""`precision`: int8 on CPU serves, says so in /v1/info, and keeps its documented error bounds.

The bounds are asserted, not the speed: a fixed set of GRPO-like groups (G = 8 step-by-step
completions of one prompt, some near-copies of a sibling, 0/1 rewards) goes to a real
`precision=int8` service over HTTP and to the fp32 engine; the changes of the pairwise
similarities, the DRA advantages and the MMR advantages must stay within what
docs/embedding.md promises for int8 (the issue's tighter targets 0.01 / 0.02 / 0.05 are met
by bf16 on CPUs with native bf16, checked here where this CPU has it).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import loopback

pytest.importorskip("onnxruntime", reason="precision=int8 needs the cpu-int8 extra")

G = 8
# What docs/embedding.md states for int8 (measured 0.047 / 0.052 / 0.21 on bench_precision's
# 48 groups): the largest similarity change, the largest DRA advantage change, and the 95th
# percentile of the MMR advantage changes.
INT8_BOUNDS = {"sim_max": 0.06, "dra_max": 0.08, "mmr_p95": 0.30}
ISSUE_BOUNDS = {"sim_max": 0.01, "dra_max": 0.02, "mmr_p95": 0.05}

ITEMS = ["apples", "pencils", "tickets", "marbles", "books", "coins"]


def groups(seed: int = 23, n: int = 10) -> tuple[list[list[str]], list[list[float]]]:
    rng = random.Random(seed)
    out, rewards = [], []
    for _ in range(n):
        v0, item = rng.randint(5, 60), rng.choice(ITEMS)
        members: list[str] = []
        for _ in range(G):
            if members and rng.random() < 0.25:  # a near-copy with another final answer
                base = members[rng.randrange(len(members))]
                members.append(base[: base.rfind("So")] + f"So the answer is {rng.randint(1, 99)}.")
                continue
            v, steps = v0, [f"Let's solve this step by step. We start with {v0} {item}."]
            for k in range(rng.randint(2, 40)):
                a = rng.randint(2, 40)
                if rng.random() < 0.5:
                    steps.append(f"Step {k}: add {a} {item}: {v} + {a} = {v + a}.")
                    v += a
                else:
                    steps.append(f"Step {k}: multiply by {a % 4 + 2}: {v} x {a % 4 + 2} = "
                                 f"{v * (a % 4 + 2)}.")  # fmt: skip
                    v *= a % 4 + 2
            members.append(" ".join(steps) + f" So the answer is {v}.")
        p = rng.uniform(0.2, 0.8)
        out.append(members)
        rewards.append([float(rng.random() < p) for _ in range(G)])
    return out, rewards


def changes(ref: np.ndarray, vec: np.ndarray, adv_ref: dict, adv: dict) -> dict[str, float]:
    r, v = ref.reshape(-1, G, ref.shape[1]), vec.reshape(-1, G, vec.shape[1])
    iu = np.triu_indices(G, 1)
    sim = np.abs(np.einsum("bid,bjd->bij", r, r) - np.einsum("bid,bjd->bij", v, v))
    return {
        "sim_max": float(sim[:, iu[0], iu[1]].max()),
        "dra_max": float(np.abs(adv_ref["dra"] - adv["dra"]).max()),
        "mmr_p95": float(np.percentile(np.abs(adv_ref["mmr"] - adv["mmr"]), 95)),
    }


def body(texts: list[list[str]], rewards: list[list[float]], method: str) -> dict:
    return {
        "method": method,
        "advantages": "grpo",
        "groups": [{"completions": t, "rewards": r} for t, r in zip(texts, rewards, strict=True)],
    }


DOCS = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"


def documented(prefix: str) -> list[str]:
    """The command line in docs/embedding.md that starts with `prefix` (comment dropped)."""
    for line in DOCS.read_text().splitlines():
        if line.startswith(prefix):
            return line.split("#")[0].split()
    raise AssertionError(f"docs/embedding.md has no line starting with {prefix!r}")


@pytest.fixture(scope="module")
def int8_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The documented `reweighter serve --precision int8`, in a fresh process, on loopback
    ports, building its artefact into a fresh cache folder (so the first start is tested)."""
    from conftest import free_port

    cache = tmp_path_factory.mktemp("int8-cache")
    argv = documented("reweighter serve --precision int8")
    port = free_port()
    argv[0] = str(Path(sys.executable).with_name("reweighter"))
    argv += ["--host", "127.0.0.1", "--http-port", str(port), "--grpc-port", "0",
             "--precision-cache-dir", str(cache), "--device", "cpu"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWEIGHTER_")}
    log = (cache / "serve.log").open("w+")
    proc = subprocess.Popen(argv, env={**env, "HF_HUB_OFFLINE": "1"}, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (cache / "serve.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the int8 service did not become ready"
            try:
                if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert list(cache.rglob("model.onnx")), "the artefact was not built where configured"
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_int8_serves_reports_and_keeps_its_bounds(int8_url: str, engine) -> None:  # noqa: ANN001
    info = httpx.get(int8_url + "/v1/info", timeout=10).json()
    assert info["precision"] == "int8" and info["device"] == "cpu"
    assert engine.info()["precision"] == "fp32"

    texts, rewards = groups()
    flat = [t for g in texts for t in g]
    got = httpx.post(int8_url + "/v1/embed", json={"inputs": flat}, timeout=300)
    assert got.status_code == 200, got.text
    vec = np.asarray(got.json()["embeddings"], dtype=np.float32)
    ref = engine.embedder.encode(flat)
    assert np.abs(vec - ref).max() > 1e-4  # it really is another forward, not fp32

    from reweighter.types import Group, ReweightRequest

    adv, adv_ref = {}, {}
    for method in ("dra", "mmr"):
        r = httpx.post(int8_url + "/v1/reweight", json=body(texts, rewards, method), timeout=300)
        assert r.status_code == 200, r.text
        adv[method] = np.asarray([g["advantages"] for g in r.json()["groups"]])
        req = ReweightRequest(
            groups=[Group(rewards=rw, completions=t) for t, rw in zip(texts, rewards, strict=True)],
            method=method, advantages="grpo",
        )  # fmt: skip
        adv_ref[method] = np.asarray([g.advantages for g in engine.reweight(req).groups])
    err = changes(ref, vec, adv_ref, adv)
    assert all(err[k] <= b for k, b in INT8_BOUNDS.items()), err


@pytest.mark.slow
def test_int8_artefact_is_built_once(tmp_path: Path, engine) -> None:  # noqa: ANN001
    from reweighter.embedding import quantize

    auto_model = engine.embedder.encoder.model[0].auto_model
    first = quantize.build_int8(auto_model, True, tmp_path)
    stamp = first.stat().st_mtime_ns
    again = quantize.build_int8(auto_model, True, tmp_path)
    assert again == first and again.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.parent.name]  # no leftovers


@pytest.mark.parametrize(
    ("precision", "device", "compile_", "needle"),
    [
        ("int8", "cuda", "off", "precision=int8 runs on CPU only"),
        ("fp16", "cpu", "off", "precision=fp16 needs a CUDA device"),
        ("int8", "cpu", "on", "compile=on compiles the torch model"),
        ("fp64", "cpu", "off", "precision must be one of"),
    ],
)
def test_bad_combinations_are_refused(
    precision: str, device: str, compile_: str, needle: str
) -> None:
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    with pytest.raises(ValueError, match=needle):
        SentenceTransformerEncoder.load(device=device, precision=precision, compile=compile_)  # type: ignore[arg-type]


@pytest.mark.process
def test_serve_refuses_fp16_on_cpu_naming_the_setting(free_port: int) -> None:
    env = {
        **os.environ,
        "REWEIGHTER_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "REWEIGHTER_COMPILE": "off",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "reweighter", "serve", "--precision", "fp16", "--host",
         "127.0.0.1", "--http-port", str(free_port), "--grpc-port", "0"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "precision=fp16 needs a CUDA device" in proc.stderr


@pytest.mark.process
def test_int8_without_the_extra_names_setting_and_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['onnxruntime'] = None\n"
        "from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder\n"
        "SentenceTransformerEncoder.load(device='cpu', precision='int8',"
        f" precision_cache_dir={str(tmp_path)!r})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert proc.returncode != 0
    assert "precision=int8 needs ONNX Runtime" in proc.stderr and "cpu-int8" in proc.stderr


@pytest.mark.slow
def test_bf16_on_cpu_meets_the_issue_bounds_or_is_refused(engine) -> None:  # noqa: ANN001
    from reweighter.embedding.sentence_transformers import (
        SentenceTransformerEncoder,
        cpu_has_native_bf16,
    )

    if not cpu_has_native_bf16():
        with pytest.raises(ValueError, match="precision=bf16 on CPU needs native bf16"):
            SentenceTransformerEncoder.load(device="cpu", precision="bf16", compile="off")
        return
    enc = SentenceTransformerEncoder.load(device="cpu", precision="bf16", compile="off")
    texts, rewards = groups()
    flat = [t for g in texts for t in g]
    ref, vec = engine.embedder.encode(flat), enc.encode(flat)

    from reweighter.engine import ReweightEngine
    from reweighter.types import Group, ReweightRequest

    plain = ReweightEngine(loopback())
    adv, adv_ref = {}, {}
    for method in ("dra", "mmr"):
        for out, e in ((adv, vec), (adv_ref, ref)):
            req = ReweightRequest(
                groups=[Group(rewards=rw, embeddings=e[i * G : (i + 1) * G])
                        for i, rw in enumerate(rewards)],
                method=method, advantages="grpo",
            )  # fmt: skip
            out[method] = np.asarray([g.advantages for g in plain.reweight(req).groups])
    err = changes(ref, vec, adv_ref, adv)
    assert all(err[k] <= b for k, b in ISSUE_BOUNDS.items()), err


@pytest.mark.slow
def test_image_build_step_builds_the_artefact_the_service_finds(tmp_path: Path, engine) -> None:  # noqa: ANN001
    """The Dockerfile's int8 step, as written, in a fresh process: it builds the artefact where
    REWEIGHTER_PRECISION_CACHE_DIR points, the folder the image's service reads."""
    root = Path(__file__).resolve().parents[2]
    dockerfile = (root / "services" / "reweighter" / "Dockerfile").read_text()
    assert (
        "ARG PRECISION=auto" in dockerfile
        and "python -m reweighter.embedding.quantize" in dockerfile
    )
    assert "--build-arg PRECISION=int8" in (root / "docs" / "deploy.md").read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWEIGHTER_")}
    env.update(HF_HUB_OFFLINE="1", REWEIGHTER_PRECISION_CACHE_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "reweighter.embedding.quantize"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    built = Path(proc.stdout.strip().splitlines()[-1])
    assert built.is_file() and built.parent.parent == tmp_path
    assert oct(built.parent.stat().st_mode & 0o777) == "0o755"  # readable by the service user
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    served = engine.embedder.encoder  # the service's own long-text policy, whatever it is
    enc = SentenceTransformerEncoder.load(
        device="cpu", precision="int8", precision_cache_dir=str(tmp_path),
        long_text=served.long_text, long_text_windows=served.long_text_windows,
    )  # fmt: skip
    assert enc.backend.ort.path == built  # the service finds it, builds none
    assert len(list(tmp_path.iterdir())) == 1
    # int8 vectors never share cache keys with fp32 ones (replicas may share a Redis)
    assert engine.embedder.namespace + "|int8" == enc.cache_namespace
