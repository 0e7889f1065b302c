"""The child process that builds the compiled encoder's package (reweighter.embedding.aot).

Apart from aot.py so that the package's rules import nothing of the encoder (no import cycle):
this entry point alone needs both (it loads the eager backend, reweighter.embedding.backends).

    python -m reweighter.embedding.aot_child --cache-dir DIR --options '{"model": null, ...}'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reweighter.embedding import aot


def main(argv: list[str] | None = None) -> int:
    """The child: load the weights as the server did (the eager backend) and build its package."""
    from reweighter.embedding.backends.aot import artefact_key
    from reweighter.embedding.backends.eager import EagerBackend

    ap = argparse.ArgumentParser(prog="python -m reweighter.embedding.aot_child")
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--options", required=True, help="the backend's options as JSON")
    args = ap.parse_args(argv)
    options = json.loads(args.options)
    eager = EagerBackend(options["model"], options["device"], options["precision"])
    cache_dir = Path(args.cache_dir)
    key = artefact_key(eager, options["max_seq_length"])
    if not aot.valid(cache_dir, key):
        aot.build(eager.transformer, key, cache_dir, eager.device)
    print(aot.paths(cache_dir, key)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
