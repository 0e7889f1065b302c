"""Reweight saved rollouts: a JSONL file of groups in, the same records with results out.

The output appears only when every line succeeded (written to a temporary file, then renamed),
so a bad line never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .config import Settings
from .errors import ReweighterError
from .types import AdvantageKind, Group, Method, ReweightRequest

_GROUP_FIELD = re.compile(r"^groups\[(\d+)\](.*)$")


class LineError(ValueError):
    """A problem in one input line; the message names the line and field."""


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield lineno, _record(line, lineno)


def _record(line: str, lineno: int) -> dict[str, Any]:
    """One line as a JSON object with the fields every group needs, or a LineError naming it."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise LineError(f"line {lineno}: not valid JSON ({e.msg})") from e
    problem = None if isinstance(rec, dict) else "expected a JSON object"
    if problem is None and "rewards" not in rec:
        problem = "missing field 'rewards'"
    if problem is not None:
        raise LineError(f"line {lineno}: {problem}")
    return rec


def _group(rec: dict[str, Any]) -> Group:
    gid = rec.get("id")
    return Group(
        rewards=rec["rewards"],
        completions=rec.get("completions"),
        embeddings=rec.get("embeddings"),
        id=None if gid is None else str(gid),
        answers=rec.get("answers"),
        prompt_key=rec.get("prompt_key"),
    )


def reweight_file(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    settings: Settings | None = None,
    method: Method | str = Method.DRA,
    params: dict[str, Any] | None = None,
    advantages: AdvantageKind | str = AdvantageKind.NONE,
    advantage_params: dict[str, Any] | None = None,
    batch_groups: int = 64,
    engine: Any = None,
) -> int:
    """Returns a process exit code: 0 on success, 2 on bad input (nothing written)."""
    from .engine import ReweightEngine

    src, dst = Path(input_path), Path(output_path)
    if not src.is_file():
        print(f"error: input file {src} does not exist", file=sys.stderr)
        return 2
    if batch_groups < 1:
        print("error: --batch-groups must be at least 1", file=sys.stderr)
        return 2
    engine = engine or ReweightEngine(settings)
    n_lines = sum(1 for line in src.open(encoding="utf-8") if line.strip())
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    try:
        with (
            os.fdopen(fd, "w", encoding="utf-8") as out,
            tqdm(total=n_lines, unit="group", desc="reweighting", disable=None) as bar,
        ):
            batch: list[tuple[int, dict[str, Any]]] = []

            def flush() -> None:
                request = ReweightRequest(
                    groups=[_group(rec) for _, rec in batch],
                    method=method,
                    params=params or {},
                    advantages=advantages,
                    advantage_params=advantage_params or {},
                    step=batch[0][1].get("step"),
                )
                try:
                    result = engine.reweight(request)
                except ReweighterError as e:
                    raise LineError(_name_line(e, batch)) from e
                for (_, rec), g in zip(batch, result.groups, strict=True):
                    rec = dict(rec)
                    rec["reweighted_rewards"] = g.rewards
                    if g.advantages is not None:
                        rec["advantages"] = g.advantages
                    stats: dict[str, Any] = {"mean_similarity": g.stats.mean_similarity}
                    for name in ("lambda_", "effective_size", "distinct_answers", "classes"):
                        if getattr(g.stats, name) is not None:
                            stats[name.rstrip("_")] = getattr(g.stats, name)
                    rec["stats"] = stats
                    rec["method"] = result.method
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                bar.update(len(batch))
                batch.clear()

            for lineno, rec in _records(src):
                # One request carries one step (outcome_ucb's memory): a new step starts one.
                if batch and rec.get("step") != batch[0][1].get("step"):
                    flush()
                batch.append((lineno, rec))
                if len(batch) >= batch_groups:
                    flush()
            if batch:
                flush()
        os.replace(tmp, dst)
    except LineError as e:
        os.unlink(tmp)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"wrote {n_lines} groups to {dst}", file=sys.stderr)
    return 0


def _name_line(err: ReweighterError, batch: list[tuple[int, dict[str, Any]]]) -> str:
    """Turn the engine's `groups[k].field` into `line N: field` for the file's reader."""
    m = _GROUP_FIELD.match(err.field or "")
    if m:
        lineno = batch[int(m.group(1))][0]
        rest = m.group(2).lstrip(".") or "group"
        return f"line {lineno}: {rest}: {err.message}"
    return str(err)
