"""What a reduced precision does to the numbers users get, and what it buys (in-process).

Accuracy (load-independent): a fixed set of realistic GRPO groups (G = 8 step-by-step
arithmetic completions of one prompt each, 40-600 word pieces, some near-copies of a sibling,
0/1 rewards) is embedded by the fp32 encoder and by each contender through the same encoder
pipeline (tokenising, windows, chunk_mean pooling): only the transformer's forward differs. Per
contender: the largest change of any pairwise cosine similarity, the largest change of any DRA
advantage and the 95th percentile of the MMR advantage changes (both GRPO advantages, computed
by the engine exactly as /v1/reweight does), against the issue's bounds 0.01 / 0.02 / 0.05.

Speed (noisy on a shared machine): `--rounds` paired, interleaved rounds of fp32 vs the
contender on the same fresh texts; the ratio's geometric mean with a 95 % interval.

    .venv/bin/python bench/bench_precision.py                 # fp32 vs int8 (the shipped recipe)
    .venv/bin/python bench/bench_precision.py --explore       # + the recipes that were tried

`--explore` adds ORT dynamic int8 with ORT's defaults (per-tensor int8 weights), and, when
openvino and nncf are installed, OpenVINO static int8 (NNCF, transformer preset, calibrated on
the encoder's own batches of generated completions) and int8 weights only; and bf16 autocast on
CPU (information: the service refuses bf16 on CPU).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib
import numpy as np  # noqa: E402
from bench_embed import ITEMS, _step, groups_of_texts  # noqa: E402
from paired import paired_rounds, ratio_ci  # noqa: E402
from roofline import peak_gflops  # noqa: E402

G = 8
BOUNDS = {"sim_max": 0.01, "dra_max": 0.02, "mmr_p95": 0.05}


def reasoning_groups(seed: int, n_groups: int, count: Callable[[str], int]) -> list[list[str]]:
    """Groups as GRPO produces them: G completions of one prompt (same start, same item), each
    its own chain of steps, 40-600 word pieces; about one in four is a near-copy of a sibling
    (same steps, another final answer), the high-similarity pairs where DRA and MMR act."""
    rng = random.Random(seed)
    groups = []
    for _ in range(n_groups):
        v0, item = rng.randint(5, 60), rng.choice(ITEMS)
        members: list[str] = []
        for _ in range(G):
            if members and rng.random() < 0.25:
                base = rng.choice(members)
                cut = base.rfind("Therefore")
                members.append(
                    f"{base[:cut]}Therefore, the answer is \\boxed{{{rng.randint(1, 999)}}}."
                )
                continue
            target = int(math.exp(rng.uniform(math.log(40), math.log(600))))
            v, k = v0, 1
            parts = [f"Let's solve this step by step. We start with {v0} {item}."]
            while count(" ".join(parts)) < target - 12:
                step, v = _step(rng, k, v)
                parts.append(step)
                k += 1
            members.append(" ".join(parts) + f" Therefore, the final answer is \\boxed{{{v}}}.")
        groups.append(members)
    return groups


def rewards_for(seed: int, n_groups: int) -> list[list[float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n_groups):
        p = rng.uniform(0.2, 0.8)
        out.append([float(rng.random() < p) for _ in range(G)])
    return out


def errors(ref: np.ndarray, vec: np.ndarray, rewards: list[list[float]]) -> dict[str, float]:
    """Changes of what users get: pairwise similarities, DRA and MMR GRPO advantages."""
    from reweighter.engine import ReweightEngine
    from reweighter.types import Group, ReweightRequest

    engine = ReweightEngine()
    r_ = ref.reshape(-1, G, ref.shape[1])
    v_ = vec.reshape(-1, G, vec.shape[1])
    iu = np.triu_indices(G, 1)
    sim = np.abs(np.einsum("bid,bjd->bij", r_, r_) - np.einsum("bid,bjd->bij", v_, v_))[
        :, iu[0], iu[1]
    ]

    def adv(e: np.ndarray, method: str) -> np.ndarray:
        req = ReweightRequest(
            groups=[Group(rewards=r, embeddings=e[i]) for i, r in enumerate(rewards)],
            method=method, advantages="grpo",
        )  # fmt: skip
        return np.asarray([g.advantages for g in engine.reweight(req).groups])

    dra = np.abs(adv(r_, "dra") - adv(v_, "dra"))
    mmr = np.abs(adv(r_, "mmr") - adv(v_, "mmr"))
    return {
        "component_max": float(np.abs(ref - vec).max()),
        "sim_max": float(sim.max()),
        "sim_p95": float(np.percentile(sim, 95)),
        "dra_max": float(dra.max()),
        "mmr_p95": float(np.percentile(mmr, 95)),
        "mmr_max": float(mmr.max()),
    }


def explore(e8, calib_texts: list[str], tmp: Path) -> dict[str, Callable[[], None]]:  # noqa: ANN001
    """Runners for the recipes that were tried; each installs itself as e8's transformer."""
    from reweighter.embedding import quantize as q

    fp32 = tmp / "fp32.onnx"
    q.export_fp32(e8.model[0].auto_model, fp32, e8.backend.eager.type_ids)
    out: dict[str, Callable[[], None]] = {}

    def ort(path: Path) -> Callable[[], None]:
        return lambda: setattr(e8.backend, "ort", q.OrtTransformer(path, e8.backend.eager.type_ids))

    from onnxruntime.quantization import QuantType, quantize_dynamic

    old = tmp / "ort-old.onnx"  # BENCHMARKS.md D's row: ORT's defaults, per-tensor int8 weights
    quantize_dynamic(str(fp32), str(old), weight_type=QuantType.QInt8)
    out["int8 ORT dynamic, per-tensor s8 weights (ORT defaults; BENCHMARKS D)"] = ort(old)
    try:
        import nncf
        import openvino as ov
        import torch
    except ImportError:
        return out
    core = ov.Core()

    class OV:
        def __init__(self, m) -> None:  # noqa: ANN001
            self.c = core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})

        def __call__(self, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            return torch.from_numpy(np.asarray(self.c(feed)[0]))

    pieces = e8.split(calib_texts)
    items = []
    for b in e8.budget.batches(pieces):
        rows = [[*e8.stage.prefix, *pieces[i].data, *e8.stage.suffix] for i in b]
        ids = np.zeros((len(rows), max(map(len, rows))), np.int64)
        mask = np.zeros_like(ids)
        for k, r in enumerate(rows):
            ids[k, : len(r)], mask[k, : len(r)] = r, 1
        items.append(
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
    static = nncf.quantize(
        core.read_model(str(fp32)), nncf.Dataset(items),
        model_type=nncf.ModelType.TRANSFORMER, subset_size=len(items),
    )  # fmt: skip
    weights = nncf.compress_weights(
        core.read_model(str(fp32)), mode=nncf.CompressWeightsMode.INT8_SYM
    )
    out["int8 OpenVINO static (NNCF transformer preset)"] = lambda: setattr(e8.backend, "ort", OV(static))  # noqa: E501
    out["int8 weights only, fp32 activations (NNCF)"] = lambda: setattr(e8.backend, "ort", OV(weights))  # noqa: E501
    return out


def main() -> None:  # noqa: C901 - a benchmark reads best top to bottom
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=48, help="groups of 8 in the accuracy set")
    ap.add_argument("--rounds", type=int, default=6, help="paired speed rounds (0: none)")
    ap.add_argument("--n", type=int, default=64, help="fresh texts per speed round")
    ap.add_argument("--explore", action="store_true")
    ap.add_argument("--cache-dir", default=None, help="int8 artefact folder (default: a temp dir)")
    args = ap.parse_args()

    import torch

    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    tmp = Path(tempfile.mkdtemp(prefix="bench-precision-"))
    e32 = SentenceTransformerEncoder.load(device="cpu", compile="off")
    t = time.perf_counter()
    cache = args.cache_dir or str(tmp / "cache")
    e8 = SentenceTransformerEncoder.load(
        device="cpu", compile="off", precision="int8", precision_cache_dir=cache
    )
    build_s = time.perf_counter() - t
    tok = e32.stage.tokenizer

    def count(s: str) -> int:
        return len(tok(s, add_special_tokens=False)["input_ids"])

    groups = reasoning_groups(20261125, args.groups, count)
    texts = [t for g in groups for t in g]
    rewards = rewards_for(7, args.groups)
    n_tok = sum(p.tokens for p in e32.split(texts))
    print(f"accuracy set: {args.groups} groups of {G} ({len(texts)} completions, {n_tok} tokens "
          f"incl. windows); int8 artefact ready in {build_s:.1f} s")  # fmt: skip
    ref = e32.encode(texts)

    contenders: dict[str, Callable[[], None] | None] = {
        "int8 (shipped: ORT dynamic, optimum avx2 recipe)": None
    }
    if args.explore:
        calib = groups_of_texts(99, 256, 20, 300, 0.0, count)
        contenders.update(explore(e8, calib, tmp))
    shipped = e8.backend.ort
    rows = []
    for name, install in contenders.items():
        e8.backend.ort = shipped
        if install is not None:
            install()
        rows.append((name, errors(ref, e8.encode(texts), rewards), e8.backend.ort))
    if args.explore:
        ebf = SentenceTransformerEncoder.load(device="cpu", compile="off")
        ebf.model.to(torch.bfloat16)
        rows.append(
            ("bf16 weights on CPU (information)", errors(ref, ebf.encode(texts), rewards), None)
        )
    print()
    print("| contender | max abs component | max abs sim change | p95 sim | max abs DRA adv change "
          "| p95 abs MMR adv change | max MMR | within bounds |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, e, _ in rows:
        ok = all(e[k] <= b for k, b in BOUNDS.items())
        bad = [k for k, b in BOUNDS.items() if e[k] > b]
        print(f"| {name} | {e['component_max']:.4f} | {e['sim_max']:.4f} | {e['sim_p95']:.4f} "
              f"| {e['dra_max']:.4f} | {e['mmr_p95']:.4f} | {e['mmr_max']:.4f} "
              f"| {'yes' if ok else 'no: ' + ', '.join(bad)} |")  # fmt: skip
    print(f"bounds: {BOUNDS}")

    if args.rounds <= 0:
        return
    peak = peak_gflops()
    print(f"\nspeed: {args.rounds} paired interleaved rounds of {args.n} fresh texts; "
          f"sgemm peak {peak:.0f} GFLOP/s; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    rounds = [groups_of_texts(1000 + i, args.n, 150, 210, 0.0, count) for i in range(args.rounds)]
    for name, _, runner in rows:
        if runner is None:
            continue
        e8.backend.ort = runner
        e32.encode(rounds[0][:8]), e8.encode(rounds[0][:8])  # warm
        ta, tb = paired_rounds(lambda i: e32.encode(rounds[i]), lambda i: e8.encode(rounds[i]),
                               args.rounds)  # fmt: skip
        ci = ratio_ci([a / b for a, b in zip(ta, tb, strict=True)])
        print(f"- {name}: {ci} faster than fp32 (fp32 {args.n / np.median(ta):.1f} texts/s, "
              f"contender {args.n / np.median(tb):.1f})")  # fmt: skip
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
