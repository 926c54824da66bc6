"""OpenTelemetry tracing (issue 54, service/tracing.py): one server span per request with its
stages as attributes and child spans, the batch's span linked to every request in it, the
caller's traceparent continued, sampling, no input text in any attribute; spans exported for
real over OTLP/HTTP to a receiver the test runs; off by default."""

from __future__ import annotations

import asyncio
import http.server
import threading

import pytest
from pydantic import ValidationError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from bench.servers import free_port
from service.settings import Settings
from service.tracing import Tracing, traces_url
from tests.bundles import running_app

PAIRS = [{"premise": "a man is playing a guitar on the stage", "hypothesis": "a man plays music"},
         {"premise": "two dogs run across the snowy field", "hypothesis": "the dogs are sleeping"}]
STAGES = ("parse", "queue", "inference", "serialise")


def traced_app(service_bundles, exporter, sample_ratio=1.0, **settings):
    app_settings = Settings(model_repository=service_bundles, **settings)
    context = running_app(app_settings)

    class Wrapped:
        async def __aenter__(self):
            app, client = await context.__aenter__()
            app.state.service.tracing = Tracing.with_processor(SimpleSpanProcessor(exporter), "attserve-test",
                                                               sample_ratio)
            return app, client

        async def __aexit__(self, *exc):
            return await context.__aexit__(*exc)

    return Wrapped()


def test_one_trace_per_request_with_its_stages_and_the_batch_linked_to_each(service_bundles):
    exporter = InMemorySpanExporter()

    async def scenario():
        # a batch delay, so the two concurrent requests share a batch
        async with traced_app(service_bundles, exporter, max_batch_delay_ms=50) as (app, client):
            answers = await asyncio.gather(*(client.post("/entailment", json=pair) for pair in PAIRS))
            assert all(a.status_code == 200 for a in answers), [a.text for a in answers]

    asyncio.run(scenario())
    spans = exporter.get_finished_spans()
    servers = [s for s in spans if s.kind == SpanKind.SERVER]
    assert [s.name for s in servers] == ["POST /entailment"] * 2
    [batch] = [s for s in spans if s.name == "batch inference"]
    # the batch ran both requests, and links to each request's span
    assert batch.attributes["attserve.batch_size"] == 2
    assert {link.context.span_id for link in batch.links} == {s.context.span_id for s in servers}
    for server in servers:
        a = server.attributes
        assert (a["attserve.model"], a["attserve.model_version"], a["http.response.status_code"]) == ("nli", "test-1", 200)
        assert a["attserve.batch_size"] == 2
        for stage in ("parse", "tokenize", "queue", "inference", "serialise"):
            assert a[f"attserve.{stage}_ms"] >= 0
        children = {s.name: s for s in spans if s.parent is not None and s.parent.span_id == server.context.span_id}
        assert set(STAGES) <= set(children)
        # tokenizing is part of the queue wait (as x-queue-time): a child of the queue span
        [tokenize] = [s for s in spans if s.name == "tokenize" and s.context.trace_id == server.context.trace_id]
        assert tokenize.parent.span_id == children["queue"].context.span_id
        # each request's inference span links back to the batch
        assert [link.context.span_id for link in children["inference"].links] == [batch.context.span_id]
        # the stages run in order, inside the request's span
        order = [children[name] for name in STAGES]
        assert all(x.start_time <= y.start_time for x, y in zip(order, order[1:]))
        assert server.start_time <= order[0].start_time and order[-1].end_time <= server.end_time
    # no input text in any attribute of any span
    texts = {t for pair in PAIRS for t in pair.values()} | {w for pair in PAIRS for t in pair.values() for w in t.split()
                                                            if len(w) > 3}
    values = [str(v) for s in spans for v in s.attributes.values()] + \
        [str(v) for s in spans for link in s.links for v in (link.attributes or {}).values()]
    assert not [v for v in values if any(t in v for t in texts)]


def test_a_callers_traceparent_is_continued_and_sampling_follows_it(service_bundles):
    exporter = InMemorySpanExporter()
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

    async def scenario():
        async with traced_app(service_bundles, exporter, sample_ratio=0.0, max_batch_delay_ms=1) as (app, client):
            sampled = await client.post("/classify", json={"text": "hello", "model": "topic"},
                                        headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
            unsampled = await client.post("/classify", json={"text": "hello", "model": "topic"},
                                          headers={"traceparent": f"00-{trace_id}-{parent_id}-00"})
            no_parent = await client.post("/classify", json={"text": "hello again", "model": "topic"})
            return sampled, unsampled, no_parent

    answers = asyncio.run(scenario())
    assert [a.status_code for a in answers] == [200, 200, 200]
    spans = exporter.get_finished_spans()
    # ratio 0: only the request whose caller sampled its trace is traced, in the caller's trace
    assert {format(s.context.trace_id, "032x") for s in spans} == {trace_id}
    [server] = [s for s in spans if s.kind == SpanKind.SERVER]
    assert format(server.parent.span_id, "016x") == parent_id and server.parent.is_remote
    assert server.attributes["attserve.model"] == "topic"


def test_a_share_of_root_traces_is_kept(service_bundles):
    exporter = InMemorySpanExporter()

    async def scenario():
        async with traced_app(service_bundles, exporter, sample_ratio=0.5, max_batch_delay_ms=1) as (app, client):
            for i in range(100):
                assert (await client.post("/tokenize", json={"text": f"text {i}", "model": "topic"})).status_code == 200

    asyncio.run(scenario())
    kept = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert 25 <= len(kept) <= 75  # binomial(100, 0.5): 5 standard deviations either side


def test_errors_and_tokenize_are_traced_with_their_status(service_bundles):
    exporter = InMemorySpanExporter()

    async def scenario():
        async with traced_app(service_bundles, exporter, max_batch_delay_ms=1) as (app, client):
            await client.post("/classify", json={"text": "hi", "model": "nope"})
            await client.post("/tokenize", json={"text": "hi there", "model": "topic"})

    asyncio.run(scenario())
    servers = {s.name: s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER}
    assert servers["POST /classify"].attributes["http.response.status_code"] == 422
    tokenize = servers["POST /tokenize"]
    assert tokenize.attributes["http.response.status_code"] == 200 and tokenize.attributes["attserve.model"] == "topic"
    assert tokenize.attributes["attserve.tokenize_ms"] >= 0


def test_off_by_default_and_the_endpoint_is_checked():
    assert Settings().otlp_endpoint is None and Tracing.from_settings(Settings()) is None
    assert Settings(otlp_endpoint="  ").otlp_endpoint is None  # set but empty (a compose default): off
    with pytest.raises(ValidationError, match="otlp_endpoint"):
        Settings(otlp_endpoint="collector:4318")  # no scheme: refused at start-up, not at the first export
    assert traces_url("http://collector:4318") == traces_url("http://collector:4318/v1/traces/") == \
        "http://collector:4318/v1/traces"


class _Receiver(http.server.BaseHTTPRequestHandler):
    posts: list[tuple[str, str, bytes]] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["content-length"]))
        type(self).posts.append((self.path, self.headers["content-type"], body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def otlp_receiver():
    port = free_port()
    _Receiver.posts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", _Receiver.posts
    server.shutdown()
    server.server_close()


def test_spans_reach_an_otlp_http_collector(service_bundles, otlp_receiver):
    endpoint, posts = otlp_receiver
    settings = Settings(model_repository=service_bundles, max_batch_delay_ms=1, otlp_endpoint=endpoint,
                        otlp_service_name="attserve-e2e")

    async def scenario():
        async with running_app(settings) as (app, client):
            return await client.post("/classify", json={"text": "the team won the championship", "model": "topic"})

    answer = asyncio.run(scenario())  # the app's shutdown exports what is buffered
    assert answer.status_code == 200
    assert posts and all(path == "/v1/traces" and ctype == "application/x-protobuf" for path, ctype, _ in posts)
    spans, services = [], set()
    for _, _, body in posts:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            services |= {a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"}
            spans += [s for scope in resource_spans.scope_spans for s in scope.spans]
    assert services == {"attserve-e2e"}
    names = sorted(s.name for s in spans)
    assert names == sorted(["POST /classify", "parse", "queue", "tokenize", "inference", "serialise",
                            "batch inference"])
    [server] = [s for s in spans if s.name == "POST /classify"]
    attributes = {a.key: a.value for a in server.attributes}
    assert attributes["attserve.model"].string_value == "topic"
    assert attributes["attserve.batch_size"].int_value == 1
