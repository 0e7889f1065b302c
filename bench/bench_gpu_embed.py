"""Benchmark: embedding throughput at fixed-length inputs, in process, on the GPU (issue 15's
H100 target: >= 1M tokens/s at 256-token inputs).

Why a script of its own: the other embedding benchmarks (bench_batching, bench_first_contact)
hold a CPU workload (~180-piece texts, a 2-core sgemm roofline, a CPU baseline); the GPU target
is a rate at exactly 256 tokens a sequence, against the GPU's own half-precision matmul peak.

Inputs: fresh texts of random whole-word vocabulary entries, `--tokens` word pieces each with
[CLS]/[SEP] (256 = MiniLM's full window, one piece a text, no padding), checked against the
encoder's own count. Contenders, each the median of `--runs` (the first run of each is preceded
by a warm-up pass on other texts):

- `encoder.encode`: what the service's synchronous path does (tokenise, token-budget batches of
  16k tokens on CUDA, fp16 weights under autocast, vectors back to the host);
- forward only: `embed_pieces` on texts tokenised beforehand (the model alone);
- tokenise only: `split` (the host-side share of the first row);
- the batcher: `CachingEmbedder.aencode` (no cache), `--concurrency` requests at once, i.e. the
  service's path in process with its fairness slices (32k tokens on CUDA);
- plain `SentenceTransformer.encode(batch_size=32 and 256)` with the same half-precision model;
- with `--compile on` (default where `compile=auto` compiles): a second encoder compiled before
  its rows, encode and forward only again, with the compile's seconds.

Tokens/s counts the real tokens of the sequences run (specials included: 256 a text). The
roofline column is the useful FLOPs (bench/lib/roofline.py's model) over the peak of a large
half-precision matmul measured in the same run. Accuracy: the largest change of any embedding
component and of any cosine similarity between 256 texts, against the fp32 encoder on CPU.

    .venv/bin/python bench/bench_gpu_embed.py                        # CUDA: the target rows
    .venv/bin/python bench/bench_gpu_embed.py --device cpu --n 64 --runs 1   # a dry run on CPU
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib
from roofline import FlopModel  # noqa: E402

from reweighter.embedding.embedder import CachingEmbedder  # noqa: E402
from reweighter.embedding.sentence_transformers import (  # noqa: E402
    SentenceTransformerEncoder,
    auto_compiles,
    resolve_device,
)

TARGET_TOKENS_S = 1_000_000


def half_peak_tflops(device: str, n: int = 8192, reps: int = 10) -> float:
    """Best of `reps` n x n x n matmuls at fp16 on `device` (CUDA), else fp32 on CPU (n 2048)."""
    cuda = device.startswith("cuda")
    n = n if cuda else 2048
    dtype = torch.float16 if cuda else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    best = float("inf")
    with torch.inference_mode():
        for i in range(reps + 2):
            sync()
            t = time.perf_counter()
            a @ b
            sync()
            if i >= 2:
                best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e12


def make_texts(encoder: SentenceTransformerEncoder, n: int, tokens: int, seed: int) -> list[str]:
    """`n` fresh texts of exactly `tokens` word pieces with the specials: random whole words of
    the vocabulary (each one piece), so the length is known without tokenising."""
    vocab = encoder.model.tokenizer.get_vocab()
    words = sorted(w for w in vocab if w.isascii() and w.isalpha() and w.islower() and len(w) > 2)
    if len(words) < 100:
        raise RuntimeError("the tokenizer's vocabulary has too few whole words for this bench")
    k = tokens - 2
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(words), size=(n, k))
    texts = [" ".join(words[j] for j in row) for row in idx]
    counted = encoder.count_tokens(texts[:64])
    if any(c != tokens for c in counted):
        raise RuntimeError(f"texts meant to be {tokens} tokens counted {sorted(set(counted))}")
    return texts


def timed(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def main() -> None:  # noqa: C901 - reads top to bottom
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cuda, cpu")
    ap.add_argument("--precision", default="auto", help="the encoder's precision (auto: fp16 "
                    "on CUDA)")  # fmt: skip
    ap.add_argument("--n", type=int, default=16384, help="texts a run")
    ap.add_argument("--tokens", type=int, default=256, help="tokens a text, specials included")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8, help="requests at once (batcher row)")
    ap.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                    help="the compiled rows: auto = where compile=auto compiles")  # fmt: skip
    ap.add_argument("--no-plain", action="store_true", help="skip plain SentenceTransformer rows")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()

    device = resolve_device(args.device)
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    print(f"torch {torch.__version__}, python {platform.python_version()}, device {device}"
          + (f" ({torch.cuda.get_device_name()})" if cuda else "")
          + f", {os.cpu_count()} CPU cores, TOKENIZERS_PARALLELISM="
          f"{os.environ.get('TOKENIZERS_PARALLELISM', '(unset)')}", flush=True)  # fmt: skip

    t0 = time.perf_counter()
    enc = SentenceTransformerEncoder.load(device=device, precision=args.precision, compile="off")  # type: ignore[arg-type]
    print(
        f"encoder loaded in {time.perf_counter() - t0:.1f} s: precision {enc.precision}, "
        f"window {enc.window}, budget {enc.budget}, model {enc.model_id}",
        flush=True,
    )
    flops = FlopModel.from_config(enc.model[0].auto_model.config)
    peak = half_peak_tflops(device)
    peak_kind = "fp16 matmul 8192^3" if cuda else "fp32 matmul 2048^3"
    print(f"peak ({peak_kind}): {peak:.3g} TFLOP/s", flush=True)

    texts_runs = [make_texts(enc, args.n, args.tokens, seed) for seed in range(args.runs)]
    warm = make_texts(enc, min(args.n, 2048), args.tokens, 999)
    tokens_run = args.n * args.tokens
    useful = flops.total([args.tokens] * args.n)
    rows: list[dict] = []

    def row(name: str, times: list[float], note: str = "") -> None:
        med = statistics.median(times)
        r = {"contender": name, "s": med, "texts_s": args.n / med,
             "tokens_s": tokens_run / med, "tflops": useful / med / 1e12, "note": note,
             "runs": [round(t, 4) for t in times]}  # fmt: skip
        rows.append(r)
        print(f"  {name}: {r['tokens_s']:,.0f} tokens/s ({r['texts_s']:,.0f} texts/s, "
              f"{r['tflops']:.1f} TFLOP/s useful, {100 * r['tflops'] / peak:.1f} % of peak; "
              f"runs {r['runs']} s) {note}", flush=True)  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps({"peak_tflops": peak, "rows": rows}, indent=1))

    def measure(name: str, fn: Callable[[list[str]], object], note: str = "") -> None:
        fn(warm)
        row(name, [timed(lambda t=t: fn(t), sync) for t in texts_runs], note)

    # forward only needs the pieces made beforehand (not timed)
    def forward_only(e: SentenceTransformerEncoder) -> Callable[[list[str]], object]:
        cache: dict[int, list] = {}

        def run(t: list[str]) -> object:
            pieces = cache.get(id(t))
            if pieces is None:  # the warm-up pass pays for its own split
                pieces = e.split(t)
            return e.embed_pieces(pieces)

        for t in texts_runs:
            cache[id(t)] = e.split(t)
        return run

    print("\neager:", flush=True)
    measure("encoder.encode (eager)", enc.encode)
    measure("forward only (eager)", forward_only(enc))
    measure("tokenise only (split)", enc.split)

    embedder = CachingEmbedder(enc, None)

    def batched(t: list[str]) -> object:
        per = -(-len(t) // args.concurrency)

        async def go() -> None:
            await asyncio.gather(*(embedder.aencode(t[i : i + per])
                                   for i in range(0, len(t), per)))  # fmt: skip

        return asyncio.run(go())

    measure(f"batcher, {args.concurrency} requests at once (eager)", batched,
            f"slice_tokens {embedder.batcher.slice_tokens}")  # fmt: skip
    embedder.close()
    so_far = max(r["tokens_s"] for r in rows if r["contender"].startswith(("encoder", "batcher")))
    verdict = "met" if so_far >= TARGET_TOKENS_S else "missed"
    print(f"  so far (eager, end to end): {so_far:,.0f} tokens/s against the target "
          f"{TARGET_TOKENS_S:,}: {verdict}", flush=True)  # fmt: skip

    if not args.no_plain:
        for bs in (32, 256):
            measure(f"plain SentenceTransformer.encode(batch_size={bs})",
                    lambda t, bs=bs: enc.model.encode(t, batch_size=bs))  # fmt: skip

    # accuracy against the fp32 encoder on CPU (256 texts)
    sample = texts_runs[0][:256]
    ref = SentenceTransformerEncoder.load(device="cpu", precision="fp32", compile="off")
    a, b = enc.encode(sample), ref.encode(sample)
    sims = np.abs(a @ a.T - b @ b.T).max()
    accuracy = {"max_abs_component": float(np.abs(a - b).max()), "max_abs_similarity": float(sims)}
    print(
        f"\naccuracy vs fp32 on CPU, {len(sample)} texts: largest component change "
        f"{accuracy['max_abs_component']:.2e}, largest similarity change "
        f"{accuracy['max_abs_similarity']:.2e} (bound 0.01)",
        flush=True,
    )
    del ref

    compile_s = None
    if args.compile == "on" or (args.compile == "auto" and auto_compiles(device, enc.precision)):
        print("\ncompiled (compile=on, blocking):", flush=True)
        t0 = time.perf_counter()
        comp = SentenceTransformerEncoder.load(device=device, precision=args.precision, compile="on")  # type: ignore[arg-type]  # noqa: E501
        compile_s = time.perf_counter() - t0
        print(f"  compiled encoder ready after {compile_s:.1f} s (state {comp.compile_state})",
              flush=True)  # fmt: skip
        measure("encoder.encode (compiled)", comp.encode,
                f"recompile fallbacks {comp.backend.recompile_fallbacks}")  # fmt: skip
        measure("forward only (compiled)", forward_only(comp),
                f"recompile fallbacks {comp.backend.recompile_fallbacks}")  # fmt: skip

    name = torch.cuda.get_device_name() if cuda else platform.processor() or "cpu"
    print(f"\n### Embedding at {args.tokens}-token inputs, in process, {name}\n")
    print(f"{args.n} fresh texts a run, median of {args.runs}; precision {enc.precision}; "
          f"peak {peak:.3g} TFLOP/s ({peak_kind}); accuracy vs fp32 CPU: component "
          f"{accuracy['max_abs_component']:.1e}, similarity {accuracy['max_abs_similarity']:.1e}"
          + (f"; compile {compile_s:.0f} s" if compile_s else "") + "\n")  # fmt: skip
    print("| contender | tokens/s | texts/s | useful TFLOP/s | % of peak | note |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['contender']} | {r['tokens_s']:,.0f} | {r['texts_s']:,.0f} | "
            f"{r['tflops']:.1f} | {100 * r['tflops'] / peak:.1f} % | {r['note']} |"
        )
    best = max((r for r in rows if "only" not in r["contender"]
                and not r["contender"].startswith("plain")),
               key=lambda r: r["tokens_s"])  # fmt: skip
    verdict = "met" if best["tokens_s"] >= TARGET_TOKENS_S else "missed"
    print(
        f"\nTarget >= {TARGET_TOKENS_S:,} tokens/s at {args.tokens}-token inputs (an H100's; "
        f"this is {name}): best end-to-end row {best['contender']} {best['tokens_s']:,.0f}: "
        f"{verdict}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"device": name, "peak_tflops": peak, "accuracy": accuracy, "compile_s": compile_s,
             "rows": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
