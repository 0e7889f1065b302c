"""The child process that builds the compiled encoder's package (reweighter.embedding.aot).

Apart from aot.py so that the package's rules import nothing of the encoder (no import cycle):
this entry point alone needs both.

    python -m reweighter.embedding.aot_child --cache-dir DIR --options '{"model": null, ...}'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reweighter.embedding import aot


def main(argv: list[str] | None = None) -> int:
    """The child: load the encoder as the server did (compile off) and build its package."""
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    ap = argparse.ArgumentParser(prog="python -m reweighter.embedding.aot_child")
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--options", required=True, help="the encoder's options as JSON")
    args = ap.parse_args(argv)
    options = json.loads(args.options)
    enc = SentenceTransformerEncoder(**options, compile="off")
    cache_dir = Path(args.cache_dir)
    key = enc.artefact_key()
    if not aot.valid(cache_dir, key):
        aot.build(enc.model[0].auto_model, key, cache_dir, enc.device)
    print(aot.paths(cache_dir, key)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
