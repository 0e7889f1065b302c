"""The quickstart's demo: a real service on loopback, a collapsing group, three methods compared.

It starts `reweighter serve` as a child process on free ports (exactly what a user runs), waits
for /readyz, sends one group over HTTP and gRPC, and prints GRPO vs DRA vs MMR advantages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx

from .config import Settings
from .service import free_port
from .types import AdvantageKind, Group, Method, ReweightRequest, ReweightResult

PROMPT = "What is 17 * 24?"
_COPIES = [
    "17 * 24 = 17 * 20 + 17 * 4 = 340 + 68 = 408. The answer is 408.",
    "17 * 24 = 17 * 20 + 17 * 4 = 340 + 68 = 408. So the answer is 408.",
    "We have 17 * 24 = 17 * 20 + 17 * 4 = 340 + 68 = 408. The answer is 408.",
    "17 * 24 = (17 * 20) + (17 * 4) = 340 + 68 = 408. The answer is 408.",
    "17 * 24 = 17 * 20 + 17 * 4 = 340 + 68 = 408. Answer: 408.",
    "First, 17 * 24 = 17 * 20 + 17 * 4 = 340 + 68 = 408. The answer is 408.",
]
COMPLETIONS = [
    *_COPIES,
    "17 * 24 = 17 * 25 - 17 = 425 - 17 = 398. The answer is 398.",
    "Halve and double: 17 * 24 = 34 * 12 = 68 * 6 = 408, since 68 * 6 is 60 * 6 + 8 * 6.",
]
LABELS = [f"copy {i + 1}" for i in range(len(_COPIES))] + ["wrong", "distinct correct"]
REWARDS = [1.0] * len(_COPIES) + [0.0, 1.0]


def serve_command(http_port: int, grpc_port: int) -> list[str]:
    """`reweighter serve` on loopback with this interpreter: what a user runs, as a child."""
    return [
        sys.executable,
        "-m",
        "reweighter",
        "serve",
        "--host",
        "127.0.0.1",
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
    ]


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with code {proc.returncode} while starting")
        try:
            if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the service at {url} was not ready after {timeout:.0f} s")


def _requests() -> dict[str, ReweightRequest]:
    group = [Group(rewards=REWARDS, completions=COMPLETIONS, id="17x24")]
    return {
        name: ReweightRequest(groups=group, method=method, advantages=AdvantageKind.GRPO)
        for name, method in (("GRPO", Method.NONE), ("DRA", Method.DRA), ("MMR", Method.MMR))
    }


def format_table(results: dict[str, ReweightResult]) -> str:
    names = list(results)
    head = f"{'completion':<18}{'reward':>7}" + "".join(f"{n + ' adv':>11}" for n in names)
    lines = [head, "-" * len(head)]
    for i, label in enumerate(LABELS):
        row = f"{label:<18}{REWARDS[i]:>7.1f}"
        for n in names:
            row += f"{results[n].groups[0].advantages[i]:>11.3f}"
        lines.append(row)
    g = results[names[0]].groups[0]
    lines.append(f"mean pairwise similarity of the group: {g.stats.mean_similarity:.3f}")
    if "MMR" in results and results["MMR"].groups[0].stats.lambda_ is not None:
        lines.append(f"MMR adaptive lambda: {results['MMR'].groups[0].stats.lambda_:.3f}")
    return "\n".join(lines)


def run_demo(transport: str = "both", settings: Settings | None = None) -> int:
    settings = settings or Settings()
    http_port, grpc_port = free_port(), free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for name in ("model", "device", "long_text", "max_seq_length", "compile"):
        value = getattr(settings, name)
        if value is not None:
            env[f"REWEIGHTER_{name.upper()}"] = str(value)
    if settings.redis_url is not None:
        env["REDIS_URL"] = settings.redis_url
    cmd = serve_command(http_port, grpc_port)
    print(
        f"starting: reweighter serve --http-port {http_port} --grpc-port {grpc_port}",
        file=sys.stderr,
    )
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{http_port}"
    try:
        _wait_ready(url, proc)
        print(
            f"\nprompt: {PROMPT}  (6 near-copies of one correct path, 1 wrong, "
            "1 distinct correct path)\n"
        )
        outputs: dict[str, dict[str, ReweightResult]] = {}
        if transport in ("http", "both"):
            from .client import ReweighterClient

            with ReweighterClient(url) as client:
                outputs["HTTP"] = {k: client.reweight(r) for k, r in _requests().items()}
        if transport in ("grpc", "both"):
            from .client import GrpcReweighterClient

            with GrpcReweighterClient(f"127.0.0.1:{grpc_port}") as client:
                outputs["gRPC"] = {k: client.reweight(r) for k, r in _requests().items()}
        first = next(iter(outputs.values()))
        print(format_table(first))
        if len(outputs) == 2:
            same = all(
                abs(a - b) < 1e-5
                for k in first
                for a, b in zip(
                    outputs["HTTP"][k].groups[0].advantages,
                    outputs["gRPC"][k].groups[0].advantages,
                    strict=True,
                )
            )
            print(f"HTTP and gRPC answers identical: {same}")
        dra = first["DRA"].groups[0].rewards
        print(
            "\nDRA gives the distinct correct path reward "
            f"{dra[-1]:.3f} vs {sum(dra[:6]) / 6:.3f} for each near-copy: GRPO's credit no longer "
            "flows to the collapsed path."
        )
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
