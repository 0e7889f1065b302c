"""The service lifecycle: both transports over one engine (`Service`), and the same on its own
thread (`BackgroundService`) for tests, benchmarks and notebooks.

Both transports share one engine, so one dynamic batcher merges HTTP and gRPC traffic. The
ports open at once and the model loads in the background: /healthz answers immediately, /readyz
and gRPC health say SERVING only once the model is loaded. `stop(grace)` stops accepting new
work and lets in-flight requests finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

from .errors import server_extra_missing

try:
    import uvicorn
except ModuleNotFoundError as e:  # a light install (`pip install reweighter`) has no server
    raise (server_extra_missing(e, "the reweighter service") or e) from e

from .api.http.connections import ConnectionGuard, connection_limits
from .config import Settings
from .engine.surface import EngineSurface
from .shutdown import draining
from .tenancy import Tenants
from .tls import server_tls

log = logging.getLogger("reweighter.server")

ENGINE_STOP_S = 2.0
"""After the servers stop, the encoder's thread gets this long to finish its current slice."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` right now (tests, demos and benchmarks start servers on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the Service owns shutdown for both transports."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def freeze_heap() -> None:
    """Move every object alive now (the model, torch, transformers: about 500,000 of them) to
    the permanent generation, out of the collector's reach. Why: a full collection otherwise
    walks them all, 3 to 5 s on a loaded 2-core machine, holding the GIL and so the event loop;
    an assembly flood allocates enough to trigger one every few seconds, and /healthz waited
    up to 4.4 s (issue 29; bench/bench_health_flood.py). Nothing loaded at start is freed
    later, so nothing is lost by never collecting it."""
    gc.freeze()


class Core:
    """What serves requests over one engine, whatever server carries them: who may call
    (`tenants`), the drain (`drained`, what the transports call; `draining`, what a shutdown
    expires), the `metrics`, the group `assembler` (not started: `await assembler.start()`) and
    the HTTP `app`. `Service` puts uvicorn and gRPC in front of it; the Ray Serve deployment
    (reweighter.deploy.ray) puts Serve's proxy and its handles."""

    def __init__(self, settings: Settings, engine: EngineSurface) -> None:
        from .api.http.app import create_app
        from .api.metrics import Metrics
        from .assembly import GroupAssembler, make_store

        s = settings
        # who may call, shared by both transports: a reload (SIGHUP) applies to both at once
        self.tenants = Tenants.from_settings(s)
        # the transports reach the engine through the drain: see Service.stop()
        self.drained, self.draining = draining(engine)
        self.metrics = Metrics(engine)
        # one assembler for both transports: HTTP and gRPC members of a group meet here
        self.assembler = GroupAssembler(self.drained, make_store(s), s)
        self.metrics.watch_assembly(self.assembler)
        self.app = create_app(
            self.drained, s, metrics=self.metrics, assembler=self.assembler, tenants=self.tenants
        )


class Service:
    """Both transports over one engine, on the running event loop.

    Pass an `engine` that is already loaded (tests, benchmarks) to share one model between
    instances; otherwise the service builds one from `settings` and loads it in the background.
    Ports 0 pick free ports; `http_port` / `grpc_port` tell which.
    """

    def __init__(
        self,
        settings: Settings,
        engine: EngineSurface | None = None,
        *,
        log_config: Any = "uvicorn",
    ) -> None:
        self.settings = settings
        # both TLS files or neither, readable and a pair: refused before anything is built
        self.tls = server_tls(settings)
        self._owns_engine = engine is None
        if engine is None:
            from .engine import ReweightEngine

            engine = ReweightEngine(settings)
        self.engine: EngineSurface = engine
        self._log_config = uvicorn.config.LOGGING_CONFIG if log_config == "uvicorn" else log_config
        self._stop = asyncio.Event()
        self._exit_code = 0
        self.stopped_cleanly = True
        """False when stop() left the encoder's thread running (the caller should not join it)."""
        self._tasks: list[asyncio.Task] = []
        self.http_port = 0
        self.grpc_port = 0

    async def start(self) -> None:
        from .api.grpc.server import create_grpc_server

        s = self.settings
        core = Core(s, self.engine)
        await core.assembler.start()
        drained, self.draining = core.drained, core.draining
        self.tenants, self.metrics, self.assembler, self.app = (
            core.tenants,
            core.metrics,
            core.assembler,
            core.app,
        )
        # uvicorn runs with lifespan="off" (the Service starts and stops both transports), so
        # the app's lifespan runs here: its shutdown releases what routes hold (the OpenRLHF
        # route's upstream connection pool) once the HTTP server has closed, see stop()
        self._app_lifespan = self.app.router.lifespan_context(self.app)
        await self._app_lifespan.__aenter__()
        self.grpc = create_grpc_server(
            drained, s, metrics=self.metrics, assembler=self.assembler, tenants=self.tenants
        )
        self.grpc_port = self.grpc.port
        sock = _bind(s.host, s.http_port)
        self.http_port = sock.getsockname()[1]
        bound, backlog = connection_limits(s.max_connections)
        self.connections = ConnectionGuard(
            bound, s.header_timeout_s, s.body_timeout_s, ready=lambda: drained.ready
        )  # health probes answered by the connections: api/http/connections.py
        self.metrics.watch_connections(self.connections)
        config = uvicorn.Config(
            self.app,
            http=self.connections.protocol(),  # TCP_NODELAY, deadlines, the bound, probes
            backlog=backlog,
            timeout_keep_alive=s.keepalive_timeout_s,
            lifespan="off",
            log_level=s.log_level.lower(),
            log_config=self._log_config,
            access_log=s.log_level.lower() == "debug",
            timeout_graceful_shutdown=None,
            # TLS is asyncio's, below the connection layer: GuardedConnection sees plain bytes
            ssl_certfile=self.tls.cert_file if self.tls else None,
            ssl_keyfile=self.tls.key_file if self.tls else None,
        )
        self.http = _Uvicorn(config)
        await self.grpc.start()
        self._tasks.append(asyncio.create_task(self.http.serve(sockets=[sock])))
        while not self.http.started:
            if self._tasks[0].done():
                self._tasks[0].result()
                raise RuntimeError("the HTTP server stopped while starting")
            await asyncio.sleep(0.01)
        log.info(
            "serving HTTP on %s:%d and gRPC on %s:%d%s",
            s.host,
            self.http_port,
            s.host,
            self.grpc_port,
            f" over TLS ({self.tls.cert_file})" if self.tls else "",
        )
        if not self.engine.ready:
            self._tasks.append(asyncio.create_task(self._load()))
        else:
            freeze_heap()

    async def _load(self) -> None:
        try:
            await asyncio.to_thread(self.engine.load)
        except Exception:
            log.exception("loading the embedding model failed; shutting down")
            self._exit_code = 1
            self._stop.set()
            return
        freeze_heap()
        await self.grpc.mark_serving()
        embedder = self.engine.embedder
        assert embedder is not None
        log.info("model loaded: %s on %s", embedder.model_id, embedder.device)

    def request_stop(self) -> None:
        self._stop.set()

    def force_stop(self) -> None:
        self.http.force_exit = True
        self._stop.set()

    async def wait(self) -> int:
        """Until a stop is requested (or the model fails to load); returns the exit code."""
        await self._stop.wait()
        return self._exit_code

    async def stop(self, grace: float = 30.0) -> None:
        """Stop accepting, let in-flight requests finish (up to `grace` s), run the HTTP app's
        shutdown handlers, release the engine.

        Just before `grace` runs out, calls still running are answered NotReady (503 /
        UNAVAILABLE, retryable) and their encoder work dropped, so the servers can close
        with every request answered; the engine then gets a few seconds to stop its thread."""
        self._stop.set()
        self.stopped_cleanly = True
        loop = asyncio.get_running_loop()
        drain = loop.call_later(max(0.0, grace - 0.5), self.draining.expire)
        self.http.config.timeout_graceful_shutdown = grace + 2.0
        self.http.should_exit = True
        # waiting group members get a retryable 503 at once rather than holding the drain
        await asyncio.gather(
            self.grpc.stop(grace), self._tasks[0], self.assembler.aclose(), return_exceptions=True
        )
        drain.cancel()
        try:
            await self._app_lifespan.__aexit__(None, None, None)
        except Exception:
            log.exception("the HTTP app's shutdown handlers failed")
        for task in self._tasks[1:]:
            if not task.done():
                task.cancel()
        if self._owns_engine:
            try:
                await asyncio.wait_for(self.engine.aclose(), timeout=ENGINE_STOP_S)
            except TimeoutError:
                self.stopped_cleanly = False
                log.warning("the encoder did not stop within %.0f s; leaving it", ENGINE_STOP_S)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class BackgroundService:
    """A Service on its own event loop in a daemon thread: for tests, benchmarks and notebooks.

    with BackgroundService(Settings(http_port=0, grpc_port=0), engine) as svc:
        ReweighterClient(svc.http_url).reweight(...)
    """

    def __init__(self, settings: Settings, engine: EngineSurface | None = None) -> None:
        self.settings = settings
        self._engine = engine
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._grace = 5.0
        self.service: Service | None = None

    @property
    def engine(self) -> EngineSurface:
        assert self.service is not None
        return self.service.engine

    @property
    def http_url(self) -> str:
        assert self.service is not None
        return f"http://{_url_host(self.settings.host)}:{self.service.http_port}"

    @property
    def grpc_target(self) -> str:
        assert self.service is not None
        return f"{_url_host(self.settings.host)}:{self.service.grpc_port}"

    def start(self, timeout: float = 60.0) -> BackgroundService:
        self._thread = threading.Thread(target=self._run, name="reweighter-service", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("the service did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            self.service = Service(self.settings, self._engine, log_config=None)
            await self.service.start()
        except BaseException as e:
            self._error = e
            self._started.set()
            return
        self._started.set()
        await self.service.wait()
        await self.service.stop(self._grace)

    def stop(self, grace: float = 5.0) -> None:
        """Drain and stop (in-flight requests finish), then join the thread."""
        if self._loop is None or self.service is None or self._thread is None:
            return
        self._grace = grace
        self._loop.call_soon_threadsafe(self.service.request_stop)
        self._thread.join(timeout=grace + 60)

    def __enter__(self) -> BackgroundService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


__all__ = ["BackgroundService", "Core", "Service", "free_port"]
