"""Roofline helpers shared by the benchmarks: this machine's measured peak and a model's FLOPs.

Why: a throughput figure means little without the machine's ceiling. A large sgemm (MKL and
the oneDNN packed linear inductor uses, the better of the two) measured in the same run gives
the ceiling under the same load; the model's FLOPs per sequence come from its config, counted
on real (unpadded) tokens, so a contender that wastes work on padding or repeats gets no credit
for it and a figure above 100 % means the count is wrong.
"""

from __future__ import annotations

import time
from collections.abc import Iterable


def peak_gflops(n: int = 2048, reps: int = 5) -> float:
    """Best of an fp32 n x n matmul via MKL (torch.mm) and via oneDNN's packed linear."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)

    def best(f) -> float:
        f()
        f()
        m = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            f()
            m = min(m, time.perf_counter() - t)
        return 2 * n**3 / m / 1e9

    with torch.inference_mode():
        figures = [best(lambda: a @ b)]
        if torch.cuda.is_available():
            ca, cb = a.cuda(), b.cuda()
            figures.append(best(lambda: (ca @ cb, torch.cuda.synchronize())))
        try:
            w = torch.ops.mkldnn._reorder_linear_weight(b, n)
            linear = torch.ops.mkldnn._linear_pointwise
            figures.append(best(lambda: linear(a, w, None, "none", [], "")))
        except (AttributeError, RuntimeError):
            pass
    return max(figures)


class FlopModel:
    """FLOPs of one encoder forward per sequence length, from a BERT-like config."""

    def __init__(self, layers: int, hidden: int, intermediate: int) -> None:
        self.layers, self.hidden = layers, hidden
        # Linear layers per token: Q, K, V, output (4 d^2) and the MLP (2 d f); x2 for FMA.
        self.per_token = 2 * layers * (4 * hidden * hidden + 2 * hidden * intermediate)

    @classmethod
    def from_config(cls, config) -> FlopModel:  # noqa: ANN001 - a transformers config
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size)

    def sequence(self, n: int) -> float:
        # Attention scores and the weighted sum: 2 x (2 n^2 d) per layer.
        return self.per_token * n + self.layers * 4 * n * n * self.hidden

    def total(self, lengths: Iterable[int]) -> float:
        return sum(self.sequence(n) for n in lengths)
