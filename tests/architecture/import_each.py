"""Import each named module in a process of its own; print one JSON line per module.

Run as `python -I import_each.py MODULE...` from a neutral directory (tests/architecture
does). Third-party packages are imported once in this parent, then every module gets a forked
child in which no module of ours was imported before it: a cycle or a missing import shows
exactly as in a user's fresh `python -c "import MODULE"`, at a fraction of the cost of
starting a Python and torch per module. Two children run at a time.

IMPORT_EACH_BLOCK="torch,fastapi,reweighter.engine,...": those packages and modules cannot be
imported (as in a light install, where they are absent), preloads included.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import json
import multiprocessing
import os
import sys
import time
import traceback

OURS = ("reweighter", "reweighter_trainer")
PRELOAD = (
    "numpy", "torch", "transformers", "sentence_transformers", "pydantic", "pydantic_settings",
    "fastapi", "starlette", "uvicorn", "httpx", "grpc", "google.protobuf", "redis",
    "prometheus_client", "trl", "datasets", "accelerate", "matplotlib", "ray", "omegaconf",
    "hydra", "aiohttp", "verl", "openrlhf", "skyrl",
)  # fmt: skip


class _Absent(importlib.abc.MetaPathFinder):
    """Makes the named packages and modules unimportable, as if not installed."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if any(name == n or name.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {name!r} (absent in this install)")


def _one(module: str) -> dict[str, object]:
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in OURS)
    start = time.perf_counter()
    try:
        if leaked:
            raise RuntimeError(f"not a fresh process: {leaked} already imported")
        importlib.import_module(module)
        error = None
    except BaseException:  # noqa: BLE001 - the report is the point
        error = traceback.format_exc(limit=-8)
    return {"module": module, "error": error, "seconds": round(time.perf_counter() - start, 3)}


def main(modules: list[str]) -> None:
    blocked = {n for n in os.environ.get("IMPORT_EACH_BLOCK", "").split(",") if n}
    if blocked:
        sys.meta_path.insert(0, _Absent(blocked))
    for name in PRELOAD:  # absent, blocked or broken: the module that needs it will say
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    assert not any(m.split(".")[0] in OURS for m in sys.modules), "a preload imported ours"
    context = multiprocessing.get_context("fork")
    with context.Pool(int(os.environ.get("IMPORT_EACH_WORKERS", "2")), maxtasksperchild=1) as pool:
        for report in pool.imap_unordered(_one, modules):
            print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
