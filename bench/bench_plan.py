"""Diagnosis (in process): what planning a round costs the batcher's worker, the planner (length
indices, bisection) against the scan it replaced (tests/embedding/plan_oracle.py), on the same
queues in one run, with one tenant and with several.

Why: the fill reads each request's `LengthIndex` by bisection from the round's longest; the scan
read every queued text each round. On a CPU's small rounds (~10 completions) with a step of
thousands of texts queued, the scan cost more host CPU than tokenising (BENCHMARKS Y); until
125deb6 several tenants still took the scan. No model, no tokenizer: the queues are built from
piece lengths, the worker is simulated (indices kept as it keeps them; with several tenants
their virtual times and one-slice rounds while several are around, as `DynamicBatcher` keeps
them), and both must take the same rounds (checked here too). Median of `--runs` runs.

    .venv/bin/python bench/bench_plan.py
    PYTHONPATH=/other/checkout/services/reweighter .venv/bin/python bench/bench_plan.py

(the second line times another checkout's planner in the "planner" column, e.g. the commit
before a change; the scan column is always this checkout's oracle).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "services" / "reweighter"))  # after PYTHONPATH: see the docstring
sys.path.insert(0, str(ROOT / "tests"))

from embedding.plan_oracle import plan as scan  # noqa: E402

from reweighter.embedding.base import Budget, Piece  # noqa: E402
from reweighter.embedding.plan import (  # noqa: E402
    LengthIndex,
    RoundBudget,
    plan,
    round_budget,
)


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
    tenant: str = "default"
    weight: float = 1.0
    length_index: LengthIndex | None = None


ONE_TENANT = (
    "a step of 4,096 in one request",
    "16 requests of one group of 16",
    "4 requests of 1,024, 10 % long texts",
)
SEVERAL = (
    "a flood of 3 x 1,024 beside a light job's 8 x 16",  # within the scan's bound (4,096)
    "4 tenants (weights 1, 1, 2, 4), 4 requests of 256 each",
)


def queue(kind: str, rng: random.Random) -> list[tuple[str, float, list[Job]]]:
    """(tenant, weight, texts) per request."""

    def one() -> Job:
        return Job([rng.randint(60, 300)])

    def mixed(n: int) -> list[Job]:
        return [Job([256] * rng.randint(1, 3) + [rng.randint(10, 256)])
                if rng.random() < 0.1 else one() for _ in range(n)]  # fmt: skip

    if kind == ONE_TENANT[0]:
        return [("default", 1.0, [one() for _ in range(4096)])]
    if kind == ONE_TENANT[1]:
        return [("default", 1.0, [one() for _ in range(16)]) for _ in range(16)]
    if kind == ONE_TENANT[2]:
        return [("default", 1.0, mixed(1024)) for _ in range(4)]
    if kind == SEVERAL[0]:
        flood = [("flood", 1.0, mixed(1024)) for _ in range(3)]
        return flood + [("light", 1.0, [one() for _ in range(16)]) for _ in range(8)]
    if kind == SEVERAL[1]:
        weights = {"a": 1.0, "b": 1.0, "c": 2.0, "d": 4.0}
        return [(t, w, mixed(256)) for t, w in weights.items() for _ in range(4)]
    raise ValueError(kind)


def serve(kind: str, seed: int, budget: RoundBudget, indexed: bool) -> tuple[float, list, int]:
    """Plan rounds until the queue is served; (planning seconds, the rounds, rounds)."""
    rng = random.Random(seed)
    reqs = [Req(jobs, seq, tenant=t, weight=w) for seq, (t, w, jobs) in enumerate(queue(kind, rng))]
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
    vtime: dict[str, float] = {}
    while active:
        tenants = {r.tenant for r in active}
        shares = None
        if len(tenants) > 1:  # as DynamicBatcher._shares keeps them (all present from the start)
            vtime = {t: vtime.get(t, 0.0) for t in tenants}
            shares = vtime
        rb = round_budget(budget, len(tenants))
        t0 = time.perf_counter()
        got = plan(active, rb, shares) if indexed else scan(active, rb, shares)
        spent += time.perf_counter() - t0
        if not got:
            break
        turn += 1
        rounds.append([(s.request.seq, [(pos[id(g.job)], g.start, g.end) for g in s.ranges])
                       for s in got])  # fmt: skip
        for s in got:
            for g in s.ranges:
                if shares is not None:
                    tokens = sum(p.tokens for p in g.job.pieces[g.start : g.end])
                    vtime[s.request.tenant] += tokens / s.request.weight
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
    import reweighter.embedding.plan as planner

    print(f"Planning a round, median of {args.runs} runs; {cpu}; planner: {planner.__file__}\n")
    print("| queue | rounds | scan ms / round | planner ms / round | planner / scan |")
    print("|---|---|---:|---:|---:|")
    for bname, budget in budgets.items():
        for kind in ONE_TENANT + SEVERAL:
            per: dict[bool, list[float]] = {True: [], False: []}
            n = 0
            for run in range(args.runs):
                out = {}
                for indexed in (run % 2 == 0, run % 2 != 0):  # order alternating
                    spent, rounds, n = serve(kind, run, budget, indexed)
                    out[indexed] = rounds
                    per[indexed].append(spent / max(n, 1))
                if [[(q, sorted(r)) for q, r in rd] for rd in out[True]] != \
                        [[(q, sorted(r)) for q, r in rd] for rd in out[False]]:  # fmt: skip
                    raise SystemExit(f"the planner and the scan took different rounds: {kind}")
            sc, idx = statistics.median(per[False]), statistics.median(per[True])
            print(
                f"| {kind}, {bname} rounds | {n} | {sc * 1e3:.3f} | {idx * 1e3:.3f} | "
                f"{idx / sc:.2f}x |"
            )


if __name__ == "__main__":
    main()
