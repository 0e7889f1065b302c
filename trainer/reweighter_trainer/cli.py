"""`reweighter-train --config FILE.yaml [key=value ...]`: GRPO with diversity-aware rewards.

Overrides use dotted keys and YAML values: `max_steps=3 reweighter.method=mmr
reweighter.params.lambda=0.5`. Run several processes with `accelerate launch -m
reweighter_trainer.cli --config ...`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .config import ConfigError, load_raw, parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="reweighter-train",
        description="GRPO training (TRL) with rewards reweighted for diversity by the Reweighter.",
    )
    p.add_argument(
        "--config",
        required=True,
        help="YAML: GRPOConfig fields + model, dataset, rewards, reweighter sections",
    )
    p.add_argument("overrides", nargs="*", help="key=value (dotted keys, YAML values)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        cfg = parse(load_raw(args.config, args.overrides))
        from .train import run

        run(cfg)
    except ConfigError as e:
        print(f"reweighter-train: config error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
