"""Prometheus metrics for one service instance, in its own registry.

A per-instance CollectorRegistry (never the global default) lets two services live in one
process (tests, notebooks) without sharing counters. The embedder's plain counters
(`EmbedStats`) are read at scrape time, so the library itself never depends on Prometheus.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..engine.surface import EngineSurface
from ..errors import ReweighterError
from ..methods.catalog import CATALOG
from ..tenancy import Tenants, current_tenant
from ..timings import collecting

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)
_GROUP_BUCKETS = (1, 1.5, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 512)
_SHARE_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)

# Collapse telemetry (reweighter.engine.telemetry): figure -> (metric, help, buckets).
_GROUP_FIGURES = {
    "distinct_answers": (
        "reweighter_group_distinct_answers",
        "per group that carried answers: distinct non-null answers",
        _GROUP_BUCKETS,
    ),
    "classes": (
        "reweighter_group_classes",
        "per group: answer classes the method used (darling)",
        _GROUP_BUCKETS,
    ),
    "effective_size": (
        "reweighter_group_effective_size",
        "per group: n^2 / sum_ij max(0, s_ij), 1 for identical completions, n for orthogonal",
        _GROUP_BUCKETS,
    ),
    "mean_similarity": (
        "reweighter_group_mean_similarity",
        "per group: mean cosine similarity over distinct pairs of its completions",
        _SHARE_BUCKETS,
    ),
    "lambda_": (
        "reweighter_group_lambda",
        "per MMR group: the relevance/diversity trade-off lambda it used",
        _SHARE_BUCKETS,
    ),
    "zero_advantage_share": (
        "reweighter_zero_advantage_share",
        "per request with advantages: the share of its groups whose advantages are all 0",
        _SHARE_BUCKETS,
    ),
}

# Label values come from fixed sets, never from the client: a stream of made-up method names
# or paths must not grow a series each (unknown -> "other"). The sets are what the service
# serves: the method catalogue, the app's routes and the gRPC service's RPCs, so a new method,
# route or RPC gets its own label without being listed here.
OTHER = "other"


def method_label(name: object) -> str:
    value = getattr(name, "value", name)
    return value if isinstance(value, str) and (value == "" or value in CATALOG) else OTHER


_STAT_COUNTERS = {
    "cache_hits": "embeddings served from the cache (in-process or Redis)",
    "cache_misses": "embeddings not in the cache",
    "redis_errors": "Redis operations that failed (the request went on without the cache)",
    "dedupe_saved": "texts not encoded because an identical text was in the same batch",
    "texts_encoded": "texts run through the encoder",
    "batches": "encoder batches run",
}


def _one(kind: type[Any], name: str, doc: str, value: float) -> Any:
    """A metric family with one unlabelled sample: what every collector here reports."""
    family = kind(name, doc)
    family.add_metric([], float(value))
    return family


def _len(obj: object) -> int:
    """len() of a cache that has one; 0 for none (no cache, Redis alone)."""
    return len(obj) if hasattr(obj, "__len__") else 0  # type: ignore[arg-type]


class _EngineCollector(Collector):
    """Reads the engine's embedder counters at scrape time."""

    def __init__(self, engine: EngineSurface) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Any]:
        yield _one(GaugeMetricFamily, "reweighter_ready", "1 once the embedding model is loaded",
                   self.engine.ready)  # fmt: skip
        embedder = self.engine.embedder
        yield _one(
            GaugeMetricFamily,
            "reweighter_queue_depth",
            "requests waiting in or being served by the embedding batcher",
            getattr(getattr(embedder, "batcher", None), "pending", 0),
        )
        stats = getattr(embedder, "stats", None)
        for name, doc in _STAT_COUNTERS.items():
            yield _one(CounterMetricFamily, f"reweighter_{name}", doc, getattr(stats, name, 0) or 0)
        # the in-process caches' fill (the soak benchmark reads them to tell a growing cache
        # from a leak): the vector LRU (the front of LRU + Redis) and the tokenizer's word cache
        cache = getattr(embedder, "cache", None)
        lru = getattr(cache, "front", cache)
        yield _one(GaugeMetricFamily, "reweighter_cache_entries",
                   "vectors held by the in-process embedding cache", _len(lru))  # fmt: skip
        yield _one(GaugeMetricFamily, "reweighter_cache_bytes",
                   "bytes the in-process embedding cache counts against cache_max_bytes",
                   getattr(lru, "nbytes", 0))  # fmt: skip
        stage = getattr(getattr(embedder, "encoder", None), "stage", None)
        words = getattr(stage, "word_ids", None)
        yield _one(GaugeMetricFamily, "reweighter_word_cache_words",
                   "words held by the tokenizer's word cache", _len(words))  # fmt: skip
        memory = getattr(self.engine, "memory_built", None)
        yield _one(
            GaugeMetricFamily,
            "reweighter_memory_prompt_keys",
            "prompt keys held by outcome_ucb's answer memory (all replicas, with Redis; -1: "
            "Redis unreachable)",
            memory.size() if memory is not None else 0,
        )
        yield _one(
            CounterMetricFamily,
            "reweighter_encoder_thread_cpu_seconds",
            "CPU seconds the batcher's encoder thread spent inside the encoder (padding, the "
            "forward, copying vectors back): on a GPU what launching the work costs the host; "
            "on a CPU the forward itself, that thread's share (intra-op threads not counted)",
            getattr(getattr(embedder, "batcher", None), "forward_cpu_s", 0.0),
        )
        yield _one(
            CounterMetricFamily,
            "reweighter_requests_dropped",
            "requests dropped before they were computed: their deadline (gRPC's, or the HTTP "
            "x-request-timeout header) passed or their client went away",
            getattr(getattr(embedder, "batcher", None), "dropped", 0),
        )
        yield _one(
            CounterMetricFamily,
            "reweighter_memory_errors",
            "answer-memory operations that failed (Redis down): those requests got 503",
            memory.errors if memory is not None else 0,
        )


_ASSEMBLY_COUNTERS = {
    "members": "group members accepted for assembly (retries included)",
    "timeouts": "members answered complete=false at their deadline (reason short, computing or "
    "store_unavailable)",
    "groups_computed": "groups this instance reweighted once they were whole",
    "conflicts": "members refused with Conflict or PreconditionFailed",
}


class _AssemblyCollector(Collector):
    """Reads the group assembler's plain counters (reweighter.assembly) at scrape time."""

    def __init__(self, assembler: Any) -> None:
        self.assembler = assembler

    def collect(self) -> Iterator[Any]:
        a, prefix = self.assembler, "reweighter_assembly_"
        for name, doc in _ASSEMBLY_COUNTERS.items():
            yield _one(CounterMetricFamily, prefix + name, doc, getattr(a.stats, name))
        s, settings = a.stats, a.settings
        for name, doc, value in (
            ("open_groups", "groups with a member waiting on this instance", a.open_groups),
            ("waiting_members", "members waiting for their group on this instance", a.waiting),
            # the store's fill, across replicas with Redis (read every second), and its bounds
            ("store_groups", "open groups held in the assembly store", s.store_groups),
            ("store_members", "members held in them", s.store_members),
            ("store_groups_max", "assembly_max_open_groups", settings.assembly_max_open_groups),
            ("store_members_max", "assembly_max_held_members", settings.assembly_max_held_members),
        ):
            yield _one(GaugeMetricFamily, prefix + name, doc, value)
        mismatch = CounterMetricFamily(
            "reweighter_assembly_size_mismatch",
            "members whose group size did not fit: declared (another group_size than the "
            "group's, 409), full (a new member for a whole group, 409), late (after its round "
            "was answered: opened the next round, logged at WARNING)",
            labels=["kind"],
        )
        for kind, n in s.size_mismatch.items():
            mismatch.add_metric([kind], float(n))
        yield mismatch
        raw = CounterMetricFamily(
            "reweighter_assembly_raw_groups",
            "groups answered with raw rewards because their members' wait (timeout_s, default "
            "assembly_timeout_s) ran out, once per group on each instance a member of it waited "
            "on: short (not every member came), computing (whole, not reweighted in time); the "
            "first of each step logged at WARNING",
            labels=["reason"],
        )
        for reason, n in s.raw_groups.items():
            raw.add_metric([reason], float(n))
        yield raw


class _ConnectionCollector(Collector):
    """Reads the HTTP connection guard's counters (api/http/connections.py) at scrape time."""

    def __init__(self, guard: Any) -> None:
        self.guard = guard

    def collect(self) -> Iterator[Any]:
        g, prefix = self.guard, "reweighter_http_connections"
        yield _one(GaugeMetricFamily, prefix, "open HTTP connections", len(g.open))
        yield _one(GaugeMetricFamily, f"{prefix}_max", "the connection bound", g.max_connections)
        for name, doc in {
            "evicted": "idle connections closed to make room for a new one (bound reached)",
            "refused": "connections refused with 429: the bound reached, none idle",
            "timed_out": "connections closed for a request head or body not sent in time",
        }.items():
            yield _one(CounterMetricFamily, f"{prefix}_{name}", doc, getattr(g, name))


class _TenantCollector(Collector):
    """Per tenant of the file: its queue depth against its bound, its members waiting for
    their groups here (label values: the file's names, never the client's)."""

    def __init__(self, metrics: Metrics, tenants: Tenants) -> None:
        self.metrics, self.tenants = metrics, tenants

    def collect(self) -> Iterator[Any]:
        table = self.tenants.table
        batcher = getattr(self.metrics.engine.embedder, "batcher", None)
        depth = GaugeMetricFamily(
            "reweighter_tenant_queue_depth",
            "per tenant: requests waiting in or being served by the embedding batcher "
            "(the HPA's signal, summed; 429 at reweighter_tenant_max_queued)",
            labels=["tenant"],
        )
        bound = GaugeMetricFamily(
            "reweighter_tenant_max_queued", "per tenant: its max_queued bound", labels=["tenant"]
        )
        waiting = GaugeMetricFamily(
            "reweighter_tenant_waiting_members",
            "per tenant: group members waiting for their group on this instance",
            labels=["tenant"],
        )
        hits = CounterMetricFamily(
            "reweighter_tenant_cache_hits",
            "per tenant: embeddings served from the shared cache (in-process or Redis)",
            labels=["tenant"],
        )
        counted = getattr(getattr(self.metrics.engine.embedder, "stats", None), "tenant_hits", None)
        assembler = self.metrics.assembler
        for t in table.tenants:
            hits.add_metric([t.name], float((counted or {}).get(t.name, 0)))
            pending = batcher.pending_of(t.name) if batcher is not None else 0
            depth.add_metric([t.name], float(pending))
            limit = t.max_queued if t.max_queued is not None else getattr(batcher, "max_queue", 0)
            bound.add_metric([t.name], float(limit))
            held = assembler.waiting_of(t.name) if assembler is not None else 0
            waiting.add_metric([t.name], float(held))
        yield depth
        yield bound
        yield waiting
        yield hits


class Metrics:
    def __init__(self, engine: EngineSurface) -> None:
        self.engine = engine
        self.tenants: Tenants | None = None
        self.assembler: Any = None
        self.tenant_requests: Counter | None = None
        self.tenant_latency: Histogram | None = None
        self.tenant_figures: dict[str, Histogram] = {}
        self._endpoints: set[str] = set()
        self._routes: Callable[[], Iterable[str]] = tuple
        self._route_count = -1
        self.registry = CollectorRegistry()
        labels = ["transport", "endpoint", "method"]
        self.requests = Counter(
            "reweighter_requests",
            "requests by transport, endpoint, reweighting method and outcome",
            [*labels, "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "reweighter_request_duration_seconds",
            "request latency by transport, endpoint and reweighting method",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "reweighter_requests_in_flight",
            "requests being served",
            ["transport"],
            registry=self.registry,
        )
        self.completions = Histogram(
            "reweighter_request_completions",
            "completions per reweight request",
            ["transport"],
            buckets=_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.queue_time = Histogram(
            "reweighter_queue_duration_seconds",
            "per request: seconds its texts waited in the batcher before the encoder first "
            "served them (requests answered wholly from the cache are not counted)",
            ["transport", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.encode_time = Histogram(
            "reweighter_encode_duration_seconds",
            "per request: seconds in the embedder (cache, queue and encoder)",
            ["transport", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "reweighter_encoder_batch_size",
            "texts per encoder batch (dynamic batching across requests)",
            buckets=_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.group_figures = {
            name: Histogram(metric, doc, buckets=buckets, registry=self.registry)
            for name, (metric, doc, buckets) in _GROUP_FIGURES.items()
        }
        self.registry.register(_EngineCollector(engine))

    def allow_endpoints(self, names: Iterable[str]) -> None:
        """Endpoint label values this instance reports as themselves (others: "other")."""
        self._endpoints.update(names)

    def watch_routes(self, routes: Callable[[], Iterable[str]]) -> None:
        """Endpoint labels from `routes()` (an app's route labels), re-read when they change:
        a route added to the app after it was built is counted under its own name too."""
        self._routes = routes
        self._route_count = -1

    def endpoint_label(self, name: str) -> str:
        if name in self._endpoints:
            return name
        routes = list(self._routes())
        if len(routes) != self._route_count:
            self._route_count = len(routes)
            self._endpoints.update(routes)
        return name if name in self._endpoints else OTHER

    def watch_connections(self, guard: Any) -> None:
        """Export the HTTP connection guard's gauges and counters (reweighter_http_*)."""
        self.registry.register(_ConnectionCollector(guard))

    def watch_assembly(self, assembler: Any) -> None:
        """Export a GroupAssembler's counters and gauges (reweighter_assembly_*)."""
        self.assembler = assembler
        self.registry.register(_AssemblyCollector(assembler))

    def watch_tenants(self, tenants: Tenants) -> None:
        """With a tenants file: the reweighter_tenant_* series, labelled by the file's tenant
        names (a name not in the file, after a reload removed it, is "other"). Without one,
        nothing is added: a single-key or open service exports what it always did."""
        if self.tenants is not None or not tenants.table.configured:
            return
        self.tenants = tenants
        labels = ["tenant", "transport", "endpoint"]
        self.tenant_requests = Counter(
            "reweighter_tenant_requests", "requests by tenant, transport, endpoint and outcome",
            [*labels, "status"], registry=self.registry,
        )  # fmt: skip
        self.tenant_latency = Histogram(
            "reweighter_tenant_request_duration_seconds",
            "request latency by tenant, transport and endpoint",
            labels, buckets=_LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.tenant_figures = {
            name: Histogram(
                metric.replace("reweighter_", "reweighter_tenant_", 1), f"{doc}, by tenant",
                ["tenant"], buckets=buckets, registry=self.registry,
            )  # fmt: skip
            for name, (metric, doc, buckets) in _GROUP_FIGURES.items()
        }
        self.registry.register(_TenantCollector(self, tenants))

    def tenant_label(self, name: str | None = None) -> str:
        """The caller's tenant as a label value: a name of the file, else "other"."""
        name = current_tenant() if name is None else name
        assert self.tenants is not None
        return name if self.tenants.table.by_name(name) is not None else OTHER

    @contextmanager
    def track(self, transport: str, endpoint: str, method: str = "") -> Iterator[None]:
        """Count and time one request; the outcome label is the error class, or ok. The
        engine and batcher fill in the request's queue and encode times (reweighter.timings).
        `endpoint` is named by the handler (a constant, never client input); `method` is the
        client's and is labelled only if the catalogue has it."""
        self._endpoints.add(endpoint)  # chosen by the code that serves it, never the client
        method = method_label(method)
        start = time.perf_counter()
        gauge = self.in_flight.labels(transport)
        gauge.inc()
        status = "ok"
        timings = None
        try:
            with collecting() as timings:
                yield
        except ReweighterError as e:
            status = type(e).__name__
            raise
        except BaseException:
            status = "Internal"
            raise
        finally:
            gauge.dec()
            self.latency.labels(transport, endpoint, method).observe(time.perf_counter() - start)
            self.requests.labels(transport, endpoint, method, status).inc()
            if timings is not None and timings.encode_s is not None:
                self.encode_time.labels(transport, endpoint).observe(timings.encode_s)
            if timings is not None and timings.queue_s is not None:
                self.queue_time.labels(transport, endpoint).observe(timings.queue_s)
            if self.tenant_requests is not None and self.tenant_latency is not None:
                tenant = self.tenant_label()
                self.tenant_requests.labels(tenant, transport, endpoint, status).inc()
                self.tenant_latency.labels(tenant, transport, endpoint).observe(
                    time.perf_counter() - start
                )

    def count_rejected(self, transport: str, endpoint: str, status: str) -> None:
        """Requests refused before reaching a handler (schema errors, oversized bodies, auth)."""
        self.requests.labels(transport, self.endpoint_label(endpoint), "", status).inc()

    def render(self) -> bytes:
        self._drain_batch_sizes()
        self._drain_group_figures()
        return generate_latest(self.registry)

    def _drain_group_figures(self) -> None:
        telemetry = getattr(self.engine, "telemetry", None)
        if telemetry is None:
            return
        for name, values in telemetry.drain().items():
            for v in values:
                self.group_figures[name].observe(v)
        mine = getattr(telemetry, "drain_tenants", None)
        for tenant, name, v in mine() if mine is not None else ():
            if self.tenant_figures:
                self.tenant_figures[name].labels(self.tenant_label(tenant)).observe(v)

    def _drain_batch_sizes(self) -> None:
        stats = getattr(self.engine.embedder, "stats", None)
        sizes = getattr(stats, "batch_sizes", None)
        if not sizes:
            return
        taken = sizes[: len(sizes)]
        del sizes[: len(taken)]
        for n in taken:
            self.batch_size.observe(n)
