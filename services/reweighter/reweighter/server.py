"""`reweighter serve`: HTTP (uvicorn) and gRPC (grpc.aio) in one process on one event loop.

The flags are generated from Settings (config.add_settings_flags); the lifecycle is
reweighter.service. SIGTERM/SIGINT stop accepting new work and let in-flight requests finish
(up to --shutdown-grace seconds); a second signal forces the exit.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from . import logs
from .config import Settings, add_settings_flags, settings_from_args
from .service import BackgroundService, Service
from .shutdown import exit_now, exit_watchdog
from .tenancy import TenantsFileError
from .tls import TLSSettingsError

log = logging.getLogger("reweighter.server")

DEFAULT_GRACE_S = 30.0
EXIT_MARGIN_S = 5.0
"""The process exits at the latest this long after the grace period ends."""


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """One flag per Settings field (--http-port, --max-chars, ...) plus --shutdown-grace."""
    add_settings_flags(parser)
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=DEFAULT_GRACE_S,
        help="seconds in-flight requests get to finish after SIGTERM (default %(default)s)",
    )
    return parser


def main(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logs.install()  # no credentials in any line, no floods of one repeated line
    try:
        return asyncio.run(_serve_until_signal(settings, args.shutdown_grace))
    except (OSError, TenantsFileError, TLSSettingsError) as e:  # a port in use, a bad file
        log.error("cannot start: %s", e)
        return 2


async def _serve_until_signal(settings: Settings, grace: float) -> int:
    service = Service(settings)
    await service.start()
    logs.install()  # again: uvicorn configured its own handlers while starting
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.request_stop)
    # key rotation without a restart: the tenants file is read again (a bad one is refused)
    loop.add_signal_handler(signal.SIGHUP, service.tenants.reload)
    try:
        return await service.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        # a second signal while draining forces the exit
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, service.force_stop)
        exit_watchdog(grace + EXIT_MARGIN_S)  # whatever still runs then, the process ends
        await service.stop(grace)
        if not service.stopped_cleanly:  # a thread still busy in native code: do not join it
            exit_now(service._exit_code)


if __name__ == "__main__":  # python -m reweighter.server [flags]
    _parser = configure_parser(argparse.ArgumentParser(prog="reweighter serve"))
    sys.exit(main(_parser.parse_args(sys.argv[1:])))


__all__ = ["BackgroundService", "Service", "configure_parser", "main", "settings_from_args"]
