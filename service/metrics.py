"""Prometheus metrics (prometheus-client), one CollectorRegistry per app instance.

The names are a contract with the dashboards; labels stay low-cardinality (endpoint, model
name, HTTP status code), never per-request values. A request whose model could not be
resolved (bad body, unknown name) is counted with model="".
"""

from __future__ import annotations

import asyncio
import os

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, disable_created_metrics,
                               generate_latest)

# A `_created` series per counter and histogram child (its creation time, which Prometheus does
# not use) doubled the exposition with lines no dashboard reads: off, process-wide.
disable_created_metrics()

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKEN_BUCKETS = tuple(float(2**k) for k in range(3, 18))
# the event loop's lag is sampled this often (seconds)
LOOP_LAG_INTERVAL_S = 0.05
# with workers, each worker's process metrics are refreshed this often (seconds)
PROCESS_SAMPLE_INTERVAL_S = 5.0
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class WorkerProcessMetrics:
    """prometheus-client's process metrics (`process_*`: CPU seconds, resident and virtual
    memory, open and max file descriptors, start time) of one worker in multiprocess mode, where
    a collector only sees the worker that answers the scrape (prometheus-client's multiprocess
    docs): the ProcessCollector's samples copied into gauges with multiprocess_mode="liveall",
    one series per live worker, labelled by its pid."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.collector = ProcessCollector(registry=None)
        self.gauges: dict[str, Gauge] = {}
        for family in self.collector.collect():
            for sample in family.samples:
                self.gauges[sample.name] = Gauge(sample.name, family.documentation, registry=registry,
                                                 multiprocess_mode="liveall")
        self.sample()

    def sample(self) -> None:
        for family in self.collector.collect():
            for sample in family.samples:
                if sample.name in self.gauges:
                    self.gauges[sample.name].set(sample.value)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # this process's CPU, memory and file descriptors (`process_*`); per worker with workers
        self.worker_process = WorkerProcessMetrics(r) if os.environ.get(MULTIPROC_ENV) else None
        if self.worker_process is None:
            ProcessCollector(registry=r)
        self._series: dict[tuple, object] = {}
        self.requests = Counter(
            "attserve_requests", "HTTP requests to the inference endpoints, by status code.",
            ["endpoint", "model", "status"], registry=r,
        )
        self.request_duration = Histogram(
            "attserve_request_duration_seconds", "Time from request arrival to response.",
            ["endpoint", "model"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self._define_batch_metrics(r)
        self.model_info = Gauge(
            "attserve_model_info", "Loaded models (value 1) with the execution provider actually used.",
            ["model", "task", "architecture", "version", "provider"], registry=r,
            multiprocess_mode="livemax",
        )
        self.truncated_inputs = Counter(
            "attserve_truncated_inputs", "Inputs with a text cut to the model's max length.",
            ["model"], registry=r,
        )
        self.inputs = Counter(
            "attserve_inputs", "Inputs (items) accepted for inference.", ["endpoint", "model"], registry=r,
        )
        self.load_failures = Counter(
            "attserve_model_load_failures", "Bundles that failed to load while serving (model control): the "
            "version that served before serves on.", ["model"], registry=r,
        )
        self.control_log_skipped = Counter(
            "attserve_model_control_log_skipped", "Entries of the workers' control log (explicit mode) passed "
            "without being applied: unreadable (empty, not a change) or failed unexpectedly.", ["reason"], registry=r,
        )
        self.version_requests = Counter(
            "attserve_version_requests", "Requests to the inference endpoints by the model version that "
            "answered (compare a canary with the default), by status code.",
            ["endpoint", "model", "version", "status"], registry=r,
        )
        self.version_request_duration = Histogram(
            "attserve_version_request_duration_seconds", "Time from request arrival to response, by model version.",
            ["model", "version"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.event_loop_lag = Histogram(
            "attserve_event_loop_lag_seconds", "How late the event loop ran a timer set every "
            f"{LOOP_LAG_INTERVAL_S} s: the time a request, probe or timer waited behind other work on the loop.",
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.dropped = Counter(
            "attserve_dropped_items", "Items dropped before compute (deadline passed or caller gone).",
            ["model", "reason"], registry=r,
        )
        self._define_response_cache_metrics(r)

    def _define_batch_metrics(self, r: CollectorRegistry) -> None:
        """The batcher's: queue wait and depth, batch sizes and tokens, graph calls and their time."""
        self.queue_wait = Histogram(
            "attserve_queue_wait_seconds", "Time an item waited in its model's queue before its batch ran.",
            ["model"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.inference_duration = Histogram(
            "attserve_inference_duration_seconds", "onnxruntime time per batch.",
            ["model"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.batch_size = Histogram(
            "attserve_batch_size", "Items per batch.", ["model"], buckets=_SIZE_BUCKETS, registry=r,
        )
        self.batch_tokens = Histogram(
            "attserve_batch_tokens", "Padded tokens per batch (over its graph calls: items x the call's bucket shape).",
            ["model"], buckets=_TOKEN_BUCKETS, registry=r,
        )
        self.graph_calls = Counter(
            "attserve_graph_calls", "onnxruntime runs; a batch of very different shapes runs as several.",
            ["model"], registry=r,
        )
        self.queue_depth = Gauge(
            "attserve_queue_depth", "Items waiting in a model's queue.", ["model"], registry=r,
            multiprocess_mode="livesum",  # with workers: the sum over the live ones
        )

    def _define_response_cache_metrics(self, r: CollectorRegistry) -> None:
        """The response cache's (service.http.cache; ATTSERVE_RESPONSE_CACHE_BYTES)."""
        self.response_cache_hits = Counter(
            "attserve_response_cache_hits", "Answers served from the response cache.", ["model"], registry=r,
        )
        self.response_cache_misses = Counter(
            "attserve_response_cache_misses", "Requests the response cache did not hold (they ran).", ["model"],
            registry=r,
        )
        self.response_cache_evictions = Counter(
            "attserve_response_cache_evictions", "Answers dropped from the response cache to make room (LRU).",
            ["model"], registry=r,
        )
        self.response_cache_bytes = Gauge(
            "attserve_response_cache_bytes", "Bytes the response cache holds (answers, keys and overhead).",
            registry=r, multiprocess_mode="livesum",
        )

    def series(self, metric, *values: str):
        """`metric.labels(*values)` (label values in the metric's label order), cached per metric
        and values: labels() takes a lock and validates its arguments on every call, a cost the
        request path paid three times a request. The label values are low-cardinality (endpoint,
        model, status), so the cache stays small."""
        key = (id(metric), values)
        child = self._series.get(key)
        if child is None:
            child = self._series[key] = metric.labels(*values)
        return child


async def watch_event_loop(metrics: Metrics, interval_s: float = LOOP_LAG_INTERVAL_S) -> None:
    """Observe the event loop's lag forever: a timer every `interval_s`, and how late it ran.
    The loop runs every request's parsing, routing and answers: work on it that takes long
    stalls every connection, the health probes included."""
    loop = asyncio.get_running_loop()
    lag = metrics.event_loop_lag
    while True:
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        lag.observe(max(0.0, loop.time() - due))


async def sample_worker_process(metrics: Metrics, interval_s: float = PROCESS_SAMPLE_INTERVAL_S) -> None:
    """With workers, refresh this worker's process metrics forever (a no-op without workers:
    the ProcessCollector reads them at each scrape)."""
    if metrics.worker_process is None:
        return
    while True:
        await asyncio.sleep(interval_s)
        metrics.worker_process.sample()


def render(metrics: Metrics) -> bytes:
    """The Prometheus text of this process, or with workers (service.process.workers) of all of them:
    in multiprocess mode the values live in files that any worker can sum."""
    if metrics.worker_process is not None:
        metrics.worker_process.sample()  # the answering worker's, current
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(metrics.registry)
