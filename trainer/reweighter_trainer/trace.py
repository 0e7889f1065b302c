"""JSONL audit trail of a run: what each process scored and what the backend was asked and said.

With `reweighter.trace_dir` set, rank r appends its slice of every batch to slices.rank{r}.jsonl,
and the main process appends every backend request and result to requests.jsonl. The tests use
it to check that every group the service saw was whole, and that the rewards TRL trained on are
the ones the service returned.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from reweighter.client import Reweighter
from reweighter.types import ReweightRequest, ReweightResult


class RecordingBackend:
    """Wraps a backend and records each request with its result, as the backend returned it."""

    def __init__(self, inner: Reweighter, path: Path) -> None:
        self.inner = inner
        self.path = path
        self._lock = threading.Lock()

    def reweight(self, request: ReweightRequest) -> ReweightResult:
        result = self.inner.reweight(request)
        record = {
            "method": request.method,
            "params": dict(request.params),
            "advantages": request.advantages,
            "groups": [
                {
                    "id": g.id,
                    "completions": list(g.completions or []),
                    "rewards": list(g.rewards),
                    "result_rewards": r.rewards,
                    "result_advantages": r.advantages,
                    "mean_similarity": r.stats.mean_similarity,
                    "lambda": r.stats.lambda_,
                    "effective_size": r.stats.effective_size,
                    "distinct_answers": r.stats.distinct_answers,
                    "classes": r.stats.classes,
                }
                for g, r in zip(request.groups, result.groups, strict=True)
            ],
        }
        with self._lock, self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        return result

    def __getattr__(self, name: str) -> Any:  # info(), close(), ... of the wrapped backend
        return getattr(self.inner, name)


class SliceTrace:
    """`on_result` hook of ReweightedReward: appends this process's slice of each batch."""

    def __init__(self, directory: Path, rank: int) -> None:
        self.path = directory / f"slices.rank{rank}.jsonl"
        self.rank = rank
        self.step = 0

    def __call__(self, info: dict[str, Any]) -> None:
        record = {
            "rank": self.rank,
            "call": self.step,
            "prompts": info["prompts"],
            "completions": info["completions"],
            "base_rewards": info["base_rewards"],
            "rewards": info["rewards"],
            "groups": info["groups"],
        }
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        self.step += 1
