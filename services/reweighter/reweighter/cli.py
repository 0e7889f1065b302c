"""`reweighter` command line: serve, reweight saved rollouts, run the demo."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .config import add_settings_flags, settings_from_args
from .types import AdvantageKind, Method

# The Settings fields the offline and demo commands take (serve takes them all).
_MODEL_FIELDS = ("model", "device", "long_text", "max_seq_length", "compile", "redis_url")


def _add_method_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--method",
        default=Method.DRA.value,
        choices=[m.value for m in Method],
        help="reweighting method (default %(default)s)",
    )
    p.add_argument(
        "--similarity-floor",
        default="0.0",
        help="DRA: floor for off-diagonal similarities; 'none' = the authors' code "
        "(default %(default)s)",
    )
    p.add_argument(
        "--lambda", dest="lam", default="adaptive", help="MMR: a number in [0, 1] or 'adaptive'"
    )
    p.add_argument(
        "--advantages",
        default=AdvantageKind.NONE.value,
        choices=[k.value for k in AdvantageKind],
        help="advantages computed after reweighting (default %(default)s)",
    )


def method_params(args: argparse.Namespace) -> dict:
    """Only the chosen method's parameters: the engine rejects another method's."""
    if args.method == Method.DRA:
        floor = args.similarity_floor
        return {"similarity_floor": None if str(floor).lower() == "none" else float(floor)}
    if args.method == Method.MMR:
        lam = args.lam
        return {"lambda": lam if lam == "adaptive" else float(lam)}
    return {}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reweighter",
        description="Diversity-aware reward reweighting (DRA-GRPO, MMR-GRPO) for GRPO training.",
    )
    parser.add_argument("--version", action="version", version=f"reweighter {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    from . import server

    serve = sub.add_parser("serve", help="run the HTTP and gRPC service in one process")
    server.configure_parser(serve)
    serve.set_defaults(func=server.main)

    rw = sub.add_parser(
        "reweight",
        help="reweight a JSONL file of groups (one group per line: completions, rewards)",
    )
    rw.add_argument("input", help="JSONL: {id?, completions | embeddings, rewards} per line")
    rw.add_argument("output", help="JSONL out: each input record plus reweighted_rewards, stats")
    _add_method_flags(rw)
    add_settings_flags(rw, _MODEL_FIELDS)
    rw.add_argument("--batch-groups", type=int, default=64, help="groups per engine call")
    rw.set_defaults(func=_run_reweight)

    demo = sub.add_parser(
        "demo",
        help="start the service on the embedded default and reweight a collapsing group",
    )
    demo.add_argument("--transport", choices=["http", "grpc", "both"], default="both")
    add_settings_flags(demo, _MODEL_FIELDS)
    demo.set_defaults(func=_run_demo)
    return parser


def _run_reweight(args: argparse.Namespace) -> int:
    from .offline import reweight_file

    return reweight_file(
        args.input,
        args.output,
        settings=settings_from_args(args),
        method=args.method,
        params=method_params(args),
        advantages=args.advantages,
        batch_groups=args.batch_groups,
    )


def _run_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(transport=args.transport, settings=settings_from_args(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
