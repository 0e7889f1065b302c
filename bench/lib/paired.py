"""Paired, interleaved timing and the 95 % interval of a speed ratio (shared by the benchmarks).

Why: on a shared machine one run of A and one of B move by 2x with the neighbours' load, and a
median of unpaired runs mixes that into the comparison. Here each round times A and B on the
same input back to back, the order alternating (outside-in: ABBA...), so slow drift hits both
alike; the ratio is computed per round, and the interval comes from the spread of the per-round
log ratios (Student t), so a decision rests on an interval, not on one median.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# two-sided 95 % Student t quantiles for 1..30 degrees of freedom (the normal 1.96 beyond)
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]  # fmt: skip


@dataclass(frozen=True)
class RatioCI:
    """Geometric mean of per-round ratios (time of B / time of A: > 1 means A is faster) and its
    95 % interval; `ratios` are the rounds themselves."""

    mean: float
    low: float
    high: float
    ratios: tuple[float, ...]

    def __str__(self) -> str:
        return f"{self.mean:.2f}x [{self.low:.2f}, {self.high:.2f}] (n={len(self.ratios)})"


def ratio_ci(ratios: Sequence[float]) -> RatioCI:
    logs = [math.log(r) for r in ratios]
    m = statistics.fmean(logs)
    if len(logs) < 2:
        return RatioCI(math.exp(m), float("nan"), float("nan"), tuple(ratios))
    df = len(logs) - 1
    t = _T95[df - 1] if df <= len(_T95) else 1.96
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return RatioCI(math.exp(m), math.exp(m - half), math.exp(m + half), tuple(ratios))


def paired_rounds(
    a: Callable[[int], object],
    b: Callable[[int], object],
    rounds: int,
) -> tuple[list[float], list[float]]:
    """Seconds of `a(i)` and `b(i)` for rounds i = 0..rounds-1, interleaved ABBA-style (round i
    runs a first when i is even). Each callable gets the round index (to pick that round's
    inputs) and may return its own measured seconds (a float); anything else it returns is
    ignored and the call is timed here."""
    ta: list[float] = []
    tb: list[float] = []

    def timed(f: Callable[[int], object], i: int) -> float:
        t = time.perf_counter()
        s = f(i)
        return s if isinstance(s, float) else time.perf_counter() - t

    for i in range(rounds):
        if i % 2 == 0:
            ta.append(timed(a, i))
            tb.append(timed(b, i))
        else:
            tb.append(timed(b, i))
            ta.append(timed(a, i))
    return ta, tb
