"""The quickstart's demo: a real service on loopback, a collapsing group, three methods compared.

It starts `reweighter serve` as a child process on free ports (exactly what a user runs, through
reweighter.launch), waits for /readyz, sends one group over HTTP and gRPC, and prints GRPO vs DRA
vs MMR advantages.
"""

from __future__ import annotations

import sys

from .config import Settings
from .launch import serve
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
    given = {
        name: getattr(settings, name)
        for name in ("model", "device", "long_text", "max_seq_length", "compile", "redis_url")
        if getattr(settings, name) is not None
    }
    print("starting: reweighter serve on free loopback ports", file=sys.stderr)
    with serve(settings=given) as served:
        print(
            f"\nprompt: {PROMPT}  (6 near-copies of one correct path, 1 wrong, "
            "1 distinct correct path)\n"
        )
        outputs: dict[str, dict[str, ReweightResult]] = {}
        if transport in ("http", "both"):
            from .client import ReweighterClient

            with ReweighterClient(served.url) as client:
                outputs["HTTP"] = {k: client.reweight(r) for k, r in _requests().items()}
        if transport in ("grpc", "both"):
            from .client import GrpcReweighterClient

            with GrpcReweighterClient(served.target) as client:
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
