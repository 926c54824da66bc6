"""OpenTelemetry traces of the inference requests (issue 54), as text-embeddings-inference
and Triton give them: one SERVER span per request to an inference endpoint or /tokenize, with
the time of each stage as an attribute (`attserve.parse_ms`, `attserve.tokenize_ms`,
`attserve.queue_ms`, `attserve.inference_ms`, `attserve.serialise_ms`, `attserve.batch_size`)
and as a child span, the model's name and version, and the caller's W3C `traceparent`
continued. A batch is shared by requests of different traces: its span ("batch inference")
links to the span of every request in it (and is a child of the first, so it is kept whenever
that request is), and each request's "inference" span links back to it.

Off unless ATTSERVE_OTLP_ENDPOINT is set: then `Tracing.from_settings` is None, the SDK is
never imported, and a request pays one `is None` test in the entry point and one context
variable read when its inputs are queued (service.inference.batcher). On, the spans go to an OTLP/HTTP
collector through the SDK's BatchSpanProcessor (a background thread exports them; a request
never waits for the collector; each export gives up after ATTSERVE_OTLP_TIMEOUT_S, and so does
the flush at shutdown, so a dead or hanging collector delays neither a request nor a SIGTERM).
The start-up log says tracing is on, where to and at what ratio.

Sampling: a request is traced only once its Host and API key passed (service.http.entry
begins the span after those checks: a refused request costs nothing to trace). A trace that
starts here is kept at ATTSERVE_TRACE_SAMPLE_RATIO. A caller's traceparent continues its trace;
its sampled flag is honoured beyond that ratio for at most ATTSERVE_TRACE_FORCED_PER_S requests
a second (`ForcedSampling`, a token bucket), so no caller can make every request pay for
tracing; past that a sampled request is kept at the ratio, as a root would be. A caller's
unsampled flag is followed (nothing recorded). An unsampled request records nothing.

A traced request's answer carries W3C's `traceresponse` header (Trace Context Level 2:
`00-<trace id>-<span id>-01`), the id to look the trace up with in the trace backend.

No input text goes into any attribute: the spans carry names, sizes and times only.

The stages, as the request's context variable (`current()`) collects them:
- parse: from the first byte to the body validated and its model resolved (`resolved`);
- queue: from its inputs queued to the start of the (last) batch they ran in, tokenizing
  included (as `x-queue-time` and `attserve_queue_wait_seconds`); its child "tokenize" is the
  batcher's tokenizing step that took them (the time `tokenized` records);
- inference: each batch's onnxruntime time (`batch_ran`, called by the batcher);
- serialise: the answer's JSON (`serialised`).
The times are taken on the event loop (time.time_ns) or measured in the batcher's thread;
the spans are made when the request ends (`finish`), with those start and end times.
"""

from __future__ import annotations

import logging
import random
import shlex
import sys
import threading
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the SDK is optional (the `tracing` extra): imported only when tracing is on
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanProcessor
    from opentelemetry.trace import Span, SpanContext

log = logging.getLogger("service.tracing")

TRACES_PATH = "/v1/traces"
TRACE_RESPONSE_HEADER = b"traceresponse"
# the request being traced, in the task that serves it; None when tracing is off or the
# request is not sampled
_CURRENT: ContextVar["RequestTrace | None"] = ContextVar("attserve_request_trace", default=None)


def current() -> "RequestTrace | None":
    """The traced request running in this task, None when there is none."""
    return _CURRENT.get()


def enqueued() -> "RequestTrace | None":
    """`current()`, with the time its inputs were queued stamped on it (service.inference.batcher calls
    it as it queues a request's inputs)."""
    trace = _CURRENT.get()
    if trace is not None and trace.enqueued_ns is None:
        trace.enqueued_ns = time.time_ns()
    return trace


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL (http://collector:4318 ->
    http://collector:4318/v1/traces), as OTEL_EXPORTER_OTLP_ENDPOINT is read."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def _ms(start_ns: int, end_ns: int) -> float:
    return round((end_ns - start_ns) / 1e6, 3)


class ForcedSampling:
    """A token bucket (written here: a dozen lines, no library needed): `take` is True for at
    most `per_s` calls a second, with bursts of up to `per_s` (at least one). `clock`: seconds,
    monotonic (tests pass their own)."""

    def __init__(self, per_s: float, clock: Any = time.monotonic) -> None:
        self.per_s, self.clock = per_s, clock
        self.burst = max(per_s, 1.0) if per_s > 0 else 0.0
        self.tokens, self.stamp = self.burst, clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.per_s)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class Tracing:
    """The tracer of one app: its own TracerProvider (not the process's global one, so apps
    in one process, such as tests, do not share spans), a sampler and a processor."""

    def __init__(self, provider: "TracerProvider", sample_ratio: float = 1.0, forced_per_s: float = 10.0,
                 shutdown_timeout_s: float = 2.0) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.forced = ForcedSampling(forced_per_s)
        self.shutdown_timeout_s = shutdown_timeout_s
        # the share of root traces kept, drawn here before the SDK is called: an unsampled
        # request then costs one random number, where the SDK's own ratio sampler made a
        # non-recording span (ids, sampler, context) for it (a quarter of the cost of tracing
        # every request, at 0.1; docs/performance.md)
        self.sample_ratio = sample_ratio
        self.tracer = provider.get_tracer("attserve")
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()

    @classmethod
    def with_processor(cls, processor: "SpanProcessor", service_name: str = "attserve",
                       sample_ratio: float = 1.0, forced_per_s: float = 10.0,
                       shutdown_timeout_s: float = 2.0) -> "Tracing":
        """Tracing into `processor` (tests: the SDK's SimpleSpanProcessor(InMemorySpanExporter()))."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

        # `begin` decides which requests are traced (sample_ratio, the forced budget), so the
        # SDK keeps every span it is asked for (a caller's unsampled flag: `begin` asks none)
        provider = TracerProvider(sampler=ParentBased(ALWAYS_ON),
                                  resource=Resource.create({"service.name": service_name}), shutdown_on_exit=False)
        provider.add_span_processor(processor)
        return cls(provider, sample_ratio, forced_per_s, shutdown_timeout_s)

    @classmethod
    def from_settings(cls, settings: Any) -> "Tracing | None":
        """None unless ATTSERVE_OTLP_ENDPOINT is set; else spans batched to its collector.
        RuntimeError when the SDK is not installed (the `tracing` extra)."""
        if not settings.otlp_endpoint:
            return None
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            # the running interpreter's pip: a bare `pip` may be the system's, not the venv's
            raise RuntimeError("ATTSERVE_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
                               f"{shlex.quote(sys.executable)} -m pip install -e '.[tracing]' in the checkout "
                               f"(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http): {exc}") from None
        url = traces_url(settings.otlp_endpoint)
        # each export (its retries included) gives up after otlp_timeout_s (the SDK's default: 10 s)
        exporter = OTLPSpanExporter(endpoint=url, timeout=settings.otlp_timeout_s)
        log.info("tracing on", extra={"otlp_traces_url": url, "service_name": settings.otlp_service_name,
                                      "sample_ratio": settings.trace_sample_ratio,
                                      "forced_per_s": settings.trace_forced_per_s,
                                      "otlp_timeout_s": settings.otlp_timeout_s})
        return cls.with_processor(BatchSpanProcessor(exporter), settings.otlp_service_name,
                                  settings.trace_sample_ratio, settings.trace_forced_per_s, settings.otlp_timeout_s)

    def begin(self, scope: dict, endpoint: str) -> "RequestTrace | None":
        """Start the server span of a request that passed the Host and key checks (its
        `traceparent` continued) and make it the task's current trace; None when it is not
        sampled (see the module's docstring). `end` it with its token."""
        carrier: dict[str, str] = {}
        for name, value in scope.get("headers", ()):
            if name in (b"traceparent", b"tracestate"):
                carrier[name.decode("latin-1")] = value.decode("latin-1")
        parent = self._propagator.extract(carrier) if carrier else None
        caller = self._trace.get_current_span(parent).get_span_context() if parent is not None else None
        if caller is not None and caller.is_valid:
            if not caller.trace_flags.sampled:
                return None  # the caller's unsampled trace: nothing recorded
            kept = self.sample_ratio >= 1.0 or random.random() < self.sample_ratio or self.forced.take()
        else:  # a root (or a traceparent that does not parse: a new trace)
            kept = self.sample_ratio >= 1.0 or random.random() < self.sample_ratio
        if not kept:
            return None
        method, path = scope.get("method", ""), scope.get("path", "")
        span = self.tracer.start_span(
            f"{method} {path}", context=parent, kind=self._trace.SpanKind.SERVER, start_time=time.time_ns(),
            attributes={"http.request.method": method, "url.path": path, "http.route": path,
                        "attserve.endpoint": endpoint})
        if not span.is_recording():
            return None
        request = RequestTrace(self, span)
        request.token = _CURRENT.set(request)
        return request

    def shutdown(self) -> None:
        """Export what is still buffered and stop the exporter's thread (at shutdown), waiting
        at most shutdown_timeout_s: the SDK's own shutdown waits up to 30 s for a hanging
        collector, so it runs in a daemon thread this does not wait past its time for."""
        stopping = threading.Thread(target=self.provider.shutdown, name="otel-shutdown", daemon=True)
        stopping.start()
        stopping.join(self.shutdown_timeout_s)
        if stopping.is_alive():
            log.warning("trace export did not finish at shutdown; spans still buffered are dropped",
                        extra={"otlp_timeout_s": self.shutdown_timeout_s})


class RequestTrace:
    """What one traced request collects on its way (times in ns since the epoch), turned into
    its child spans and attributes by `finish`."""

    __slots__ = ("tracing", "span", "token", "model", "version", "parsed_ns", "enqueued_ns", "tokenize",
                 "batches", "serialise", "cache")

    def __init__(self, tracing: Tracing, span: "Span") -> None:
        self.tracing, self.span, self.token = tracing, span, None
        self.model: str | None = None
        self.version: str | None = None
        self.parsed_ns: int | None = None
        self.enqueued_ns: int | None = None
        self.tokenize: tuple[int, int] | None = None
        # (start, end, items in the batch, the batch span's context), one per batch it ran in
        self.batches: list[tuple[int, int, int, "SpanContext"]] = []
        self.serialise: tuple[int, int] | None = None
        self.cache: str | None = None

    @property
    def context(self) -> "SpanContext":
        return self.span.get_span_context()

    def response_header(self) -> bytes:
        """The `traceresponse` header's value: this request's trace and span ids, sampled."""
        context = self.span.get_span_context()
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-01".encode()

    # --- what the stages report --------------------------------------------------------------

    def resolved(self, entry: Any) -> None:
        """The body is parsed and validated, and its model resolved (`entry`, a
        service.inference.registry.ModelEntry, not imported: the batcher imports this module): the parse
        stage ends."""
        self.parsed_ns = time.time_ns()
        self.model = entry.name
        self.version = getattr(entry, "version", "") or (entry.config.version if entry.config is not None else "")

    def tokenized(self, started_ns: int, ended_ns: int | None = None) -> None:
        """The tokenizing step that took this request's inputs ran from `started_ns` to now."""
        self.tokenize = (started_ns, time.time_ns() if ended_ns is None else ended_ns)

    def serialised(self, started_ns: int) -> None:
        """The answer's JSON was written from `started_ns` to now."""
        self.serialise = (started_ns, time.time_ns())

    # --- the end -----------------------------------------------------------------------------

    def end(self, status: int, model: str | None = None) -> None:
        """The request is answered with `status`: its stages become child spans and attributes,
        and its span ends. Resets the task's current trace."""
        try:
            self._finish(status, model)
        finally:
            if self.token is not None:
                _CURRENT.reset(self.token)
                self.token = None

    def _finish(self, status: int, model: str | None) -> None:
        trace = self.tracing._trace
        tracer = self.tracing.tracer
        span = self.span
        parent = trace.set_span_in_context(span)
        started = span.start_time
        attributes: dict[str, Any] = {"http.response.status_code": status}
        if self.model is not None or model:
            attributes["attserve.model"] = self.model or model
        if self.version:
            attributes["attserve.model_version"] = self.version
        if self.cache is not None:
            attributes["attserve.cache"] = self.cache

        def child(name: str, start: int, end: int, context: Any = parent, **kwargs: Any) -> "Span":
            out = tracer.start_span(name, context=context, start_time=start, **kwargs)
            out.end(end_time=max(start, end))
            return out

        if self.parsed_ns is not None:
            attributes["attserve.parse_ms"] = _ms(started, self.parsed_ns)
            child("parse", started, self.parsed_ns)
        if self.batches:
            queue_end = self.batches[-1][0]
            queue_start = self.enqueued_ns if self.enqueued_ns is not None else queue_end
            attributes["attserve.queue_ms"] = _ms(queue_start, queue_end)
            queue = tracer.start_span("queue", context=parent, start_time=queue_start)
            if self.tokenize is not None:
                child("tokenize", *self.tokenize, context=trace.set_span_in_context(queue))
            queue.end(end_time=max(queue_start, queue_end))
            attributes["attserve.inference_ms"] = round(sum(_ms(s, e) for s, e, _, _ in self.batches), 3)
            attributes["attserve.batch_size"] = max(size for _, _, size, _ in self.batches)
            attributes["attserve.batches"] = len(self.batches)
            for start, end, size, batch in self.batches:
                child("inference", start, end, attributes={"attserve.batch_size": size},
                      links=[trace.Link(batch)])
        elif self.tokenize is not None:  # /tokenize: tokenized in a thread, no queue
            child("tokenize", *self.tokenize)
        if self.tokenize is not None:
            attributes["attserve.tokenize_ms"] = _ms(*self.tokenize)
        if self.serialise is not None:
            attributes["attserve.serialise_ms"] = _ms(*self.serialise)
            child("serialise", *self.serialise)
        span.set_attributes(attributes)
        if status >= 500:
            span.set_status(trace.Status(trace.StatusCode.ERROR))
        span.end()


def batch_ran(traced: list[RequestTrace], model: str, items: int, inference_s: float) -> None:
    """A batch of `items` inputs of `model` just ran, its onnxruntime time `inference_s`, with
    the inputs of the traced requests `traced` (service.inference.batcher calls it on the event loop).
    Its "batch inference" span links to each request's span."""
    from opentelemetry import trace

    end = time.time_ns()
    start = end - int(inference_s * 1e9)
    first = traced[0]
    links = [trace.Link(t.context, {"attserve.request": i}) for i, t in enumerate(traced)]
    batch = first.tracing.tracer.start_span(
        "batch inference", context=trace.set_span_in_context(first.span), start_time=start, links=links,
        attributes={"attserve.model": model, "attserve.batch_size": items, "attserve.traced_requests": len(traced)})
    batch.end(end_time=end)
    context = batch.get_span_context()
    for t in traced:
        t.batches.append((start, end, items, context))
