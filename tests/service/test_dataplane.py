"""The dataplane (service.inference.dataplane): one path from a validated request to its answers,
on which each check runs once per request."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

from service.inference.batcher import Batcher
from service.inference.engine import Engine
from service.inference.registry import Service
from service.settings import Settings
from tests.bundles import running_app


def counting(counts: Counter, name: str, method):
    def counted(*args, **kwargs):
        counts[name] += 1
        return method(*args, **kwargs)

    return counted


def counting_drain_reads(monkeypatch) -> Counter:
    """Service.draining made a property that counts who reads it (by the reading function's
    name); Service sets `draining` in __init__, which the setter takes."""
    readers: Counter = Counter()

    def read_draining(service):
        readers[sys._getframe(1).f_code.co_qualname] += 1
        return service.__dict__["_counted_draining"]

    def write_draining(service, value):
        service.__dict__["_counted_draining"] = value

    monkeypatch.setattr(Service, "draining", property(read_draining, write_draining), raising=False)
    return readers


def test_each_check_runs_once_for_an_entailment_request_with_inputs(service_bundles, monkeypatch):
    """The drain, the model's resolution, the engine's checks and the room in the queue: each
    once for one /entailment request with `inputs` (the task route and the engine's queueing
    each checked the drain and the room again)."""
    counts: Counter = Counter()
    monkeypatch.setattr(Service, "resolve", counting(counts, "resolve", Service.resolve))
    monkeypatch.setattr(Engine, "check", counting(counts, "engine.check", Engine.check))
    monkeypatch.setattr(Batcher, "check_room", counting(counts, "check_room", Batcher.check_room))
    drain_readers = counting_drain_reads(monkeypatch)
    body = {"inputs": [{"premise": "a man sleeps", "hypothesis": "a person rests"},
                       {"premise": "a dog runs", "hypothesis": "an animal moves"}]}

    async def scenario():
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1)) as (app, client):
            counts.clear()
            drain_readers.clear()
            response = await client.post("/entailment", json=body)
            return response, Counter(counts), Counter(drain_readers)  # before the shutdown's drain

    response, counts, drain_readers = asyncio.run(scenario())
    assert response.status_code == 200, response.text
    assert len(response.json()["results"]) == 2
    assert counts == {"resolve": 1, "engine.check": 1, "check_room": 1}
    # the body reader's own look (a drain cuts a body read short) is not the request's check
    drain_readers.pop("BodyReader.read", None)
    assert sum(drain_readers.values()) == 1, drain_readers


def test_a_response_cache_hit_is_admitted_once_and_refused_while_draining(service_bundles, monkeypatch):
    """With the response cache on, a body answered before is admitted by the dataplane before
    its bytes are looked up (one drain check, one resolve, no engine check); while draining, the
    stored answer is not served: the same 503 as every other request (the raw lookup checked the
    drain itself, and the normal path checked it again)."""
    counts: Counter = Counter()
    monkeypatch.setattr(Service, "resolve", counting(counts, "resolve", Service.resolve))
    monkeypatch.setattr(Engine, "check", counting(counts, "engine.check", Engine.check))
    drain_readers = counting_drain_reads(monkeypatch)
    body = {"premise": "a man sleeps", "hypothesis": "a person rests"}

    async def scenario():
        settings = Settings(model_repository=service_bundles, max_batch_delay_ms=1, response_cache_bytes=1 << 20)
        async with running_app(settings) as (app, client):
            first = await client.post("/entailment", json=body)
            counts.clear()
            drain_readers.clear()
            again = await client.post("/entailment", json=body)
            hit = Counter(counts), Counter(drain_readers)
            app.state.service.draining = True
            drain_readers.clear()
            during = await client.post("/entailment", json=body)
            refused_drain_readers = Counter(drain_readers)
            app.state.service.draining = False
            return first, again, hit, during, refused_drain_readers

    first, again, (hit_counts, hit_drain_readers), during, refused_drain_readers = asyncio.run(scenario())
    assert first.status_code == again.status_code == 200
    assert again.headers["x-cache"] == "hit" and again.content == first.content
    assert hit_counts == {"resolve": 1}
    for readers in (hit_drain_readers, refused_drain_readers):
        readers.pop("BodyReader.read", None)  # the body reader's own look, as above
        assert sum(readers.values()) == 1, readers
    assert during.status_code == 503 and during.headers["retry-after"] == "1"
    assert during.json()["error"]["code"] == "shutting_down"


DRAINING_REQUESTS = {
    "/entailment": {"premise": "a man sleeps", "hypothesis": "a person rests"},
    "/zero-shot": {"text": "the match ended in a draw", "candidate_labels": ["sport", "politics"]},
    "/tokenize": {"text": "a short text"},
    "/v2/models/sentiment/infer": {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["fine"]}]},
}


def test_every_inference_endpoint_is_refused_while_draining(service_bundles):
    """Admission is the dataplane's, so a draining server refuses every inference endpoint the
    same way (/tokenize used to answer on)."""
    async def scenario():
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1)) as (app, client):
            before = {path: (await client.post(path, json=body)).status_code for path, body in DRAINING_REQUESTS.items()}
            app.state.service.draining = True  # the flag alone: the batchers keep running
            during = {path: await client.post(path, json=body) for path, body in DRAINING_REQUESTS.items()}
            app.state.service.draining = False
            return before, during

    before, during = asyncio.run(scenario())
    assert before == dict.fromkeys(DRAINING_REQUESTS, 200)
    for path, response in during.items():
        assert response.status_code == 503 and response.headers["retry-after"] == "1", (path, response.text)
        error = response.json()["error"]
        assert error == "the server is shutting down" if path.startswith("/v2/") else \
            error["code"] == "shutting_down", (path, error)
