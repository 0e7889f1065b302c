"""Diagnosis (counts, not times): the forward passes and padding the DynamicBatcher forms.

Why: whether the service's scheduler wastes work is a question of counts (passes, padded
tokens), which do not move with the machine's load, unlike every timing. The real encoder
splits the first-contact workload with the real tokenizer; the forward pass is replaced by a
recorder (no model runs), so a run takes seconds and is exact. A first request holds the worker
while the scenario's requests queue, so rounds form as they do when requests arrive together.

    .venv/bin/python bench/bench_rounds.py                      # fresh and 30 % duplicates
    PYTHONPATH=/other/checkout/services/reweighter .venv/bin/python bench/bench_rounds.py

(the second line counts another checkout's scheduler, e.g. the commit before a change).
Prints one markdown table: passes and padding efficiency (real / padded tokens) per scenario,
against our encoder's one global sort (`encoder.encode`, the in-process best path).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from bench_embed import groups_of_texts  # noqa: E402

from reweighter.embedding.batcher import DynamicBatcher  # noqa: E402
from reweighter.embedding.embedder import default_slice_tokens  # noqa: E402
from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder  # noqa: E402


class Recorder:
    """The encoder's own batching of each round, recorded instead of run."""

    def __init__(self, enc: SentenceTransformerEncoder) -> None:
        self.enc = enc
        self.passes: list[tuple[int, int, int]] = []  # (rows, longest, real tokens)
        self.gate = threading.Event()

    def __call__(self, pieces):  # noqa: ANN001 - Encoder.embed_pieces
        if self.gate.is_set():
            for batch in self.enc.budget.batches(pieces):
                lengths = [pieces[i].tokens for i in batch]
                self.passes.append((len(lengths), max(lengths), sum(lengths)))
        else:
            self.gate.wait()  # the held first request: not counted
        return np.zeros((len(pieces), self.enc.dim), np.float32)


async def scenario(enc: SentenceTransformerEncoder, rec: Recorder, reqs: list[list[str]]) -> tuple:
    rec.passes.clear()
    rec.gate.clear()
    b = DynamicBatcher(enc, slice_tokens=default_slice_tokens(enc.device))  # as the service
    held = asyncio.create_task(b.submit(["held at the gate"]))
    while b.pending < 1 or b.preparing:
        await asyncio.sleep(0.005)
    tasks = [asyncio.create_task(b.submit(r)) for r in reqs]
    while b.pending < len(reqs) + 1 or b.preparing:
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    rec.gate.set()
    await asyncio.gather(*tasks)
    await held
    await b.aclose()
    return summary(rec.passes)


def summary(passes: list[tuple[int, int, int]]) -> tuple[int, float, int]:
    real = sum(p[2] for p in passes)
    padded = sum(p[0] * p[1] for p in passes)
    return len(passes), real / padded, padded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--seeds", type=int, nargs="+", default=[5000, 5100, 5200])
    args = ap.parse_args()
    enc = SentenceTransformerEncoder.load(device="cpu", compile="off")
    tok = enc.model.tokenizer

    def count(t: str) -> int:
        return len(tok(t, add_special_tokens=False, verbose=False)["input_ids"])

    rec = Recorder(enc)
    enc.embed_pieces = rec  # type: ignore[method-assign]
    import reweighter.embedding.batcher as batcher_module

    print(f"scheduler: {batcher_module.__file__}\n")
    print("| texts | seed | contender | passes | padding efficiency | padded tokens |")
    print("|---|---:|---|---:|---:|---:|")
    for dup in (0.0, 0.3):
        for seed in args.seeds:
            texts = groups_of_texts(seed + (7 if dup else 0), args.n, 150, 210, dup, count)
            uniq = list(dict.fromkeys(texts))
            pieces = enc.split(uniq)
            rows = [(len(b), max(pieces[i].tokens for i in b), sum(pieces[i].tokens for i in b))
                    for b in enc.budget.batches(pieces)]  # fmt: skip
            label = f"{args.n}, {100 * (1 - len(uniq) / len(texts)):.0f} % dup"
            out = [("one global sort (encoder.encode)", summary(rows))]
            per = 16
            eight = [texts[i : i + per] for i in range(0, len(texts), per)]
            out.append((f"batcher: {len(eight)} requests of {per}",
                        asyncio.run(scenario(enc, rec, eight))))  # fmt: skip
            out.append((f"batcher: 1 request of {len(texts)}",
                        asyncio.run(scenario(enc, rec, [texts]))))  # fmt: skip
            for name, (n, eff, padded) in out:
                print(f"| {label} | {seed} | {name} | {n} | {eff:.3f} | {padded} |")


if __name__ == "__main__":
    main()
