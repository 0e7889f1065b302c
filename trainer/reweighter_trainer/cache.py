"""Where the trainer's built models live, and how a build lands there.

A model directory (the converted SmolLM2, a tiny test model) is built once and shared by every
process that asks for it, possibly at the same time: it is built in a fresh directory beside
its target and moved into place by one rename, so nobody ever reads half a model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def cache_root() -> Path:
    """`REWEIGHTER_TRAINER_CACHE`, else ~/.cache/reweighter."""
    env = os.environ.get("REWEIGHTER_TRAINER_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "reweighter"


@contextmanager
def building(target: Path) -> Iterator[Path]:
    """A fresh directory beside `target` (`.tmp-*`) to build a model into; when the block ends
    without an error it becomes `target` in one rename (atomic: a concurrent builder's copy,
    if it landed first, wins and ours is dropped). Removed whatever happens."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        yield tmp
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
