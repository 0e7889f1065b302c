"""Run OpenRLHF's own `train_ppo_ray` argument parsing and checks on the given flags; print the
arguments it ends with as JSON (exit 2 with argparse's message when it refuses them).

`python -m openrlhf.cli.train_ppo_ray` builds its parser and checks the arguments inside its
`if __name__ == "__main__":` block, then calls `train(args)`, which needs Ray, vLLM and GPUs
(its module imports vLLM, absent here). So this runs that block, exactly as the installed
file has it (read from the package, not copied), with `train` replaced by a function that
prints the arguments: the parser, `hierarchize` and every assertion are OpenRLHF's.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _plain(x: Any) -> Any:
    if isinstance(x, SimpleNamespace):
        return {k: _plain(v) for k, v in vars(x).items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    return x if isinstance(x, str | int | float | bool | type(None)) else repr(x)


def main(flags: list[str]) -> None:
    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(), spec.origin)
    (block,) = [
        node for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
    ]  # fmt: skip
    code = compile(ast.Module(body=block.body, type_ignores=[]), spec.origin, "exec")

    def train(args: Any) -> None:
        print(json.dumps(_plain(args)))

    sys.argv = ["train_ppo_ray", *flags]
    namespace = {"__name__": "__main__", "argparse": argparse, "os": os,
                 "datetime": datetime.datetime, "train": train}  # fmt: skip
    exec(code, namespace)  # noqa: S102 - OpenRLHF's own code, from its installed package


if __name__ == "__main__":
    main(sys.argv[1:])
