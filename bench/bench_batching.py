"""Diagnosis (in-process): where the service's encoder path loses against plain `encode`.

The outside-in first-contact figure (bench_first_contact.py) mixes the forward pass, batching,
HTTP and the client, all on the same cores. This script takes them apart on one set of fresh
texts (128 completions of ~185 word pieces, the first-contact workload):

- plain `SentenceTransformer.encode` at batch sizes 32 (the baseline) and 8;
- our encoder's synchronous path (`encoder.encode`: one global longest-first sort, batches of
  <= 2048 padded tokens);
- the service's path without HTTP: the embedder's DynamicBatcher fed 8 concurrent requests of
  16 texts, as the 8 connections of first contact do, with the padding efficiency and number
  of forward passes it produced;
- optional (when `onnxruntime` is installed, e.g. `pip install onnxruntime onnx`): the same
  model exported to ONNX and run by ONNX Runtime in fp32 (plain and with its BERT fusions)
  and with dynamic int8 weights, at batch 8; with the largest difference of any embedding
  component from plain `encode` (the vectors are unit length).

    .venv/bin/python bench/bench_batching.py [--runs 3] [--no-onnx]

Prints one markdown table: texts/s, useful GFLOP/s, % of the sgemm peak measured in the same
run, and the ratio to plain encode(32) (median of per-run ratios; each run uses new texts).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib
import numpy as np  # noqa: E402
from bench_embed import groups_of_texts  # noqa: E402
from roofline import FlopModel, peak_gflops  # noqa: E402

N_TEXTS, PER_REQUEST, CONNECTIONS = 128, 16, 8


def onnx_contenders(st, tmp: Path) -> dict[str, Callable[[list[str]], np.ndarray]]:
    """fp32, fp32 with ORT's BERT fusions, int8 dynamic weights: each at batch 8."""
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer

    class Bare(torch.nn.Module):  # positional inputs, last hidden state out
        def __init__(self, m: torch.nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
            return self.m(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=False,
            )[0]

    # The wrapper is put in eval mode itself: the exporter restores the wrapper's mode after
    # tracing, and a wrapper left in training mode switched the shared model's dropout on.
    names = ["input_ids", "attention_mask", "token_type_ids"]
    plain = tmp / "minilm.onnx"
    ids = torch.ones(2, 16, dtype=torch.long)
    torch.onnx.export(
        Bare(st[0].auto_model).eval(), (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(plain), input_names=names, output_names=["h"], opset_version=17, dynamo=False,
        dynamic_axes={n: {0: "b", 1: "s"} for n in [*names, "h"]},
    )  # fmt: skip
    config = st[0].auto_model.config
    fused = tmp / "minilm-fused.onnx"
    optimizer.optimize_model(
        str(plain), model_type="bert", num_heads=config.num_attention_heads,
        hidden_size=config.hidden_size, opt_level=1,
    ).save_model_to_file(str(fused))  # fmt: skip
    int8 = tmp / "minilm-int8.onnx"
    quantize_dynamic(str(plain), str(int8), weight_type=QuantType.QInt8)
    threads = max(1, len(os.sched_getaffinity(0)))

    def runner(path: Path) -> Callable[[list[str]], np.ndarray]:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

        def run(texts: list[str]) -> np.ndarray:
            order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
            out = np.empty((len(texts), config.hidden_size), dtype=np.float32)
            for at in range(0, len(order), 8):
                batch = order[at : at + 8]
                enc = st.tokenizer(
                    [texts[i] for i in batch], padding=True, truncation=True,
                    max_length=st.max_seq_length, return_tensors="np",
                )  # fmt: skip
                h = session.run(None, {n: enc[n] for n in names})[0]
                m = enc["attention_mask"][..., None].astype(np.float32)
                v = (h * m).sum(1) / m.sum(1)
                out[batch] = v / np.linalg.norm(v, axis=1, keepdims=True)
            return out

        return run

    return {
        "onnxruntime fp32, batch 8": runner(plain),
        "onnxruntime fp32 + BERT fusions, batch 8": runner(fused),
        "onnxruntime int8 weights, batch 8": runner(int8),
    }


def main() -> None:  # noqa: C901 - a benchmark reads best top to bottom
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-onnx", action="store_true", help="skip the ONNX Runtime rows")
    args = ap.parse_args()

    from reweighter.embedding.embedder import CachingEmbedder
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    encoder = SentenceTransformerEncoder.load(compile="off")
    st = encoder.model
    tok = st.tokenizer
    flops = FlopModel.from_config(st[0].auto_model.config)

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    shapes: list[tuple[int, int, int]] = []  # (rows, padded length, real tokens) per forward
    forward = encoder._forward

    def recording(batch, count: bool = True):  # noqa: ANN001, ANN202
        lengths = [p.tokens for p in batch]
        shapes.append((len(lengths), max(lengths), sum(lengths)))
        return forward(batch, count)

    encoder._forward = recording  # type: ignore[method-assign]
    embedder = CachingEmbedder(encoder, None)

    async def batcher(texts: list[str]) -> None:
        gate = asyncio.Semaphore(CONNECTIONS)

        async def one(chunk: list[str]) -> None:
            async with gate:
                await embedder.aencode(chunk)

        chunks = [texts[i : i + PER_REQUEST] for i in range(0, len(texts), PER_REQUEST)]
        await asyncio.gather(*(one(c) for c in chunks))

    contenders: dict[str, Callable[[list[str]], object]] = {
        "plain encode(batch_size=32) (baseline)": lambda t: st.encode(t, batch_size=32),
        "plain encode(batch_size=8)": lambda t: st.encode(t, batch_size=8),
        "encoder.encode (sorted, <= 2048 padded tokens a batch)": encoder.encode,
        f"DynamicBatcher, {CONNECTIONS} concurrent requests of {PER_REQUEST}": (
            lambda t: asyncio.run(batcher(t))
        ),
    }
    errors: dict[str, float] = {}
    probe = groups_of_texts(1, 64, 150, 210, 0.0, count)
    reference = st.encode(probe, batch_size=32)
    if not args.no_onnx:
        try:
            tmp = Path(tempfile.mkdtemp(prefix="bench-onnx-"))
            for name, fn in onnx_contenders(st, tmp).items():
                contenders[name] = fn
                errors[name] = float(np.abs(fn(probe) - reference).max())
        except ImportError as e:
            print(f"(ONNX Runtime rows skipped: {e})")
    errors["encoder.encode (sorted, <= 2048 padded tokens a batch)"] = float(
        np.abs(encoder.encode(probe) - reference).max()
    )
    for fn in contenders.values():  # warm every path once
        fn(probe[:32])

    peak = peak_gflops()
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {n: [] for n in contenders}
    ratios: dict[str, list[float]] = {n: [] for n in contenders}
    padding: list[float] = []
    passes: list[int] = []
    real_flops = 0.0
    for run in range(args.runs):
        texts = groups_of_texts(100 + run, N_TEXTS, 150, 210, 0.0, count)
        real_flops = sum(flops.sequence(count(t) + 2) for t in texts)
        base = None
        for name, fn in contenders.items():
            shapes.clear()
            t0 = time.perf_counter()
            fn(texts)
            dt = time.perf_counter() - t0
            base = dt if base is None else base
            times[name].append(dt)
            ratios[name].append(base / dt)
            if name.startswith("DynamicBatcher"):
                padding.append(sum(s[2] for s in shapes) / sum(s[0] * s[1] for s in shapes))
                passes.append(len(shapes))
        peak = max(peak, peak_gflops())

    # Duplicates (load-independent counts): the first-contact `dup` workload, whose "30 %" is
    # round(0.3 * 8) = 2 copies per group of 8, i.e. 25 % of the texts; the ideal is that each
    # distinct text costs one forward row, with the padding of the fresh case.
    dup_rows = []
    for run in range(args.runs):
        texts = groups_of_texts(300 + run, N_TEXTS, 150, 210, 0.3, count)
        distinct = list(dict.fromkeys(texts))
        before = embedder.stats.texts_encoded
        shapes.clear()
        t0 = time.perf_counter()
        asyncio.run(batcher(texts))
        dt = time.perf_counter() - t0
        t0 = time.perf_counter()
        st.encode(texts, batch_size=32)
        plain_dt = time.perf_counter() - t0
        rows_run = sum(s[0] for s in shapes)
        pad = sum(s[2] for s in shapes) / sum(s[0] * s[1] for s in shapes)
        dup_rows.append((len(texts), len(distinct), embedder.stats.texts_encoded - before,
                         rows_run, len(shapes), pad, plain_dt / dt))  # fmt: skip
    embedder.close()

    print(f"\nsgemm peak {peak:.0f} GFLOP/s; load average {load:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"{N_TEXTS} fresh texts, median of {args.runs} runs\n")  # fmt: skip
    print("| contender | texts/s | useful GFLOP/s | % of peak | vs plain-32 | max abs diff |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in contenders:
        dt = statistics.median(times[name])
        gf = real_flops / dt / 1e9
        err = f"{errors[name]:.1e}" if name in errors else ""
        print(f"| {name} | {N_TEXTS / dt:.1f} | {gf:.1f} | {100 * gf / peak:.0f} % | "
              f"{statistics.median(ratios[name]):.2f}x | {err} |")  # fmt: skip
    print(f"\nDynamicBatcher: {statistics.median(passes):.0f} forward passes a run, padding "
          f"efficiency {statistics.median(padding):.2f} (real / padded tokens)")  # fmt: skip
    print("\nDuplicates through the DynamicBatcher (same 8 x 16 requests; `dup`: 2 copies in "
          "each group of 8):\n")  # fmt: skip
    print("| run | texts | distinct | texts encoded | forward rows | passes | padding eff. "
          "| vs plain-32 (this run, noisy) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (n, d, enc, rows_run, npass, pad, ratio) in enumerate(dup_rows):
        print(f"| {i} | {n} | {d} | {enc} | {rows_run} | {npass} | {pad:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
