"""Benchmark 4: the share of a GRPO step's wall time spent reweighting (the CPU smoke run).

Starts a real `reweighter serve` on free loopback ports, then runs
`reweighter-train --config trainer/configs/smoke-cpu.yaml` several times per backend (HTTP,
gRPC, in-process) and prints the median training wall time, the median time inside the
reweighting backend, and the share. The papers put the overhead at 1-6 % of a step.

    .venv/bin/python bench/bench_trainer.py [--runs 3] [--steps 3] [--method dra]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services" / "reweighter"))

from reweighter.launch import serve  # noqa: E402

CONFIG = ROOT / "trainer" / "configs" / "smoke-cpu.yaml"


def run_once(overrides: list[str], out_dir: str) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "reweighter_trainer.cli",
        "--config",
        str(CONFIG),
        f"output_dir={out_dir}",
        *overrides,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_env())
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads((Path(out_dir) / "reweighter_summary.json").read_text())


def _env() -> dict[str, str]:
    return dict(
        os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--method", default="dra")
    args = ap.parse_args()

    server = serve(env=_env())
    backends = {
        "http": [f"reweighter.url={server.url}"],
        "grpc": [f"reweighter.url=grpc://{server.target}"],
        "inprocess": ["reweighter.url=inprocess://"],
    }
    common = [f"max_steps={args.steps}", f"reweighter.method={args.method}"]
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run_once(common + backends["http"], f"{tmp}/warm")  # builds the tiny model once
            for name, extra in backends.items():
                sums = [run_once(common + extra, f"{tmp}/{name}{i}") for i in range(args.runs)]
                train = statistics.median(s["train_wall_s"] for s in sums)
                rew = statistics.median(s["reweight_s"] for s in sums)
                share = statistics.median(s["reweight_share"] for s in sums)
                calls = sums[0]["calls"]
                rows.append((name, train, rew, share, calls))
                print(f"  {name}: done", file=sys.stderr)
    finally:
        server.close()

    print(
        f"\nCPU smoke run: {args.steps} GRPO steps, method {args.method}, "
        f"median of {args.runs} runs per backend\n"
    )
    print("| backend | train wall s | reweighting s | share of wall time | backend calls |")
    print("|---|---:|---:|---:|---:|")
    for name, train, rew, share, calls in rows:
        print(f"| {name} | {train:.2f} | {rew:.3f} | {share * 100:.1f} % | {calls} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
