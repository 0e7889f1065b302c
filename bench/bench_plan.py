"""Diagnosis (in process): what planning a round costs the batcher's worker, the length index
against the scan, on the same queues in one run.

Why: with one tenant the fill reads each request's `LengthIndex` by bisection; the scan
(`_plan_scan`, still the rule with several tenants) reads every queued text each round. On a
CPU's small rounds (~10 completions) with a step of thousands of texts queued, the scan cost
more host CPU than tokenising (BENCHMARKS Y). No model, no tokenizer: the queues are built
from piece lengths, the worker is simulated (indices kept as it keeps them), and both paths
must take the same rounds (checked here too). Median of `--runs` runs.

    .venv/bin/python bench/bench_plan.py
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services" / "reweighter"))

from reweighter.embedding.base import Budget, Piece  # noqa: E402
from reweighter.embedding.plan import LengthIndex, RoundBudget, _plan_scan, plan  # noqa: E402


@dataclass(eq=False)
class Job:
    tokens: list[int]
    scheduled: int = 0
    finished: bool = False
    pieces: list[Piece] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pieces = [Piece(0, n, None) for n in self.tokens]


@dataclass(eq=False)
class Req:
    jobs: list[Job]
    seq: int
    turn: int = -1
    length_index: LengthIndex | None = None


def queue(kind: str, rng: random.Random) -> list[list[Job]]:
    def one() -> Job:
        return Job([rng.randint(60, 300)])

    if kind == "a step of 4,096 in one request":
        return [[one() for _ in range(4096)]]
    if kind == "16 requests of one group of 16":
        return [[one() for _ in range(16)] for _ in range(16)]
    if kind == "4 requests of 1,024, 10 % long texts":
        return [[Job([256] * rng.randint(1, 3) + [rng.randint(10, 256)])
                 if rng.random() < 0.1 else one() for _ in range(1024)]
                for _ in range(4)]  # fmt: skip
    raise ValueError(kind)


def serve(kind: str, seed: int, budget: RoundBudget, indexed: bool) -> tuple[float, list, int]:
    """Plan rounds until the queue is served; (planning seconds, the rounds, rounds)."""
    rng = random.Random(seed)
    reqs = [Req(jobs, seq) for seq, jobs in enumerate(queue(kind, rng))]
    holders: dict[int, list[Req]] = {}
    for r in reqs:
        for j in r.jobs:
            holders.setdefault(id(j), []).append(r)
    if indexed:
        for r in reqs:
            r.length_index = LengthIndex(r.jobs)
            r.length_index.shared = set()
    pos = {id(j): k for r in reqs for k, j in enumerate(r.jobs)}  # to compare the two runs
    active, turn, spent, rounds = list(reqs), 0, 0.0, []
    while active:
        order = sorted(active, key=lambda r: (r.turn, r.seq))
        t0 = time.perf_counter()
        got = plan(active, budget) if indexed else _plan_scan(order, budget, None, None)
        spent += time.perf_counter() - t0
        if not got:
            break
        turn += 1
        rounds.append([(s.request.seq, [(pos[id(g.job)], g.start, g.end) for g in s.ranges])
                       for s in got])  # fmt: skip
        for s in got:
            for g in s.ranges:
                was, g.job.scheduled = g.job.scheduled, g.end
                for h in holders[id(g.job)] if indexed else ():
                    h.length_index.moved(g.job, was)  # type: ignore[union-attr]
            s.request.turn = turn
        active = [r for r in active if any(j.scheduled < len(j.pieces) for j in r.jobs)]
    return spent, rounds, turn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    budgets = {"a CPU's (slice 512)": RoundBudget(Budget(2048, 4096), 512),
               "a GPU's (slice 32768)": RoundBudget(Budget(131072, 4096), 32768)}  # fmt: skip
    cpu = platform.processor() or platform.machine()
    print(f"Planning a round, median of {args.runs} runs; {cpu}\n")
    print("| queue | rounds | scan ms / round | index ms / round | index / scan |")
    print("|---|---|---:|---:|---:|")
    for bname, budget in budgets.items():
        for kind in ("a step of 4,096 in one request", "16 requests of one group of 16",
                     "4 requests of 1,024, 10 % long texts"):  # fmt: skip
            per = {True: [], False: []}
            n = 0
            for run in range(args.runs):
                out = {}
                for indexed in (run % 2 == 0, run % 2 != 0):  # order alternating
                    spent, rounds, n = serve(kind, run, budget, indexed)
                    out[indexed] = rounds
                    per[indexed].append(spent / max(n, 1))
                if [[(q, sorted(r)) for q, r in rd] for rd in out[True]] != \
                        [[(q, sorted(r)) for q, r in rd] for rd in out[False]]:  # fmt: skip
                    raise SystemExit(f"the index and the scan took different rounds: {kind}")
            scan, idx = statistics.median(per[False]), statistics.median(per[True])
            print(f"| {kind}, {bname} rounds | {n} | {scan * 1e3:.3f} | {idx * 1e3:.3f} | "
                  f"{idx / scan:.2f}x |")


if __name__ == "__main__":
    main()
