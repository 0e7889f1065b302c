"""`reweighter` command line: serve, reweight saved rollouts, run the demo."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from .config import add_settings_flags, settings_from_args
from .errors import server_extra_missing
from .methods.catalog import method_names, parameters
from .methods.estimators import ESTIMATORS, estimator_names
from .types import DEFAULT_METHOD, AdvantageKind

# The Settings fields the offline and demo commands take (serve takes them all).
_MODEL_FIELDS = ("model", "device", "long_text", "max_seq_length", "compile", "redis_url")


def _add_method_flags(p: argparse.ArgumentParser) -> None:
    """--method, one flag per parameter of the catalogue's methods, and --advantages."""
    p.add_argument(
        "--method",
        default=DEFAULT_METHOD.value,
        choices=method_names(),
        help="reweighting method (default %(default)s)",
    )
    owners: dict[str, list[str]] = {}
    fields: dict[str, Any] = {}
    for method, wire, f in parameters():
        owners.setdefault(wire, []).append(method)
        fields.setdefault(wire, f)
    for wire, methods in owners.items():
        f = fields[wire]
        default = "null" if f.default is None else f.default
        p.add_argument(
            f"--{wire.replace('_', '-')}",
            dest=f"param:{wire}",
            metavar="VALUE",
            help=f"{', '.join(methods)}: {f.description or wire} (default {default})",
        )
    p.set_defaults(param_owners=owners)
    p.add_argument(
        "--advantages",
        default=AdvantageKind.NONE.value,
        choices=estimator_names(),
        help="advantages computed after reweighting (default %(default)s)",
    )
    for spec in ESTIMATORS.values():  # one flag per parameter of the catalogue's estimators
        for name, f in spec.params_model.model_fields.items():
            flag = f"--{spec.flags or spec.name}-{name}".replace("_", "-")
            p.add_argument(
                flag,
                dest=f"adv:{name}",
                type=_flag_value,
                default=None,
                metavar=name.upper() if f.annotation is int else "VALUE",
                help=f"{spec.name}: {f.description} (advantage_params.{name})",
            )


def _flag_value(text: str) -> Any:
    """A flag's text as the JSON value it spells (0.5, null, true), else the string itself;
    "none" means null. The method's parameter model judges it."""
    if text.lower() == "none":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def method_params(args: argparse.Namespace) -> dict[str, Any]:
    """The parameters given on the command line, all of the chosen method's: a flag of another
    method is an error (it would otherwise be silently ignored)."""
    out: dict[str, Any] = {}
    for wire, methods in args.param_owners.items():
        text = getattr(args, f"param:{wire}", None)
        if text is None:
            continue
        if args.method not in methods:
            flag = f"--{wire.replace('_', '-')}"
            raise ValueError(f"{flag} is a parameter of {', '.join(methods)}, not {args.method}")
        out[wire] = _flag_value(text)
    return out


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

    try:
        params = method_params(args)
    except ValueError as e:
        print(f"reweighter reweight: error: {e}", file=sys.stderr)
        return 2
    return reweight_file(
        args.input,
        args.output,
        settings=settings_from_args(args),
        method=args.method,
        params=params,
        advantages=args.advantages,
        advantage_params=_advantage_params(args),
        batch_groups=args.batch_groups,
    )


def _advantage_params(args: argparse.Namespace) -> dict[str, Any]:
    """The estimators' flags given (`--pass-k`, ...) as the request's advantage_params (the
    engine judges them: a k with another estimator is refused naming advantage_params.k)."""
    return {
        key.removeprefix("adv:"): value
        for key, value in vars(args).items()
        if key.startswith("adv:") and value is not None
    }


def _run_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(transport=args.transport, settings=settings_from_args(args))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except ModuleNotFoundError as e:  # `reweighter serve` etc. from the light client install
        err = server_extra_missing(e, "the reweighter command")
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
