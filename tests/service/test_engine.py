"""The engine (service.inference.engine) without HTTP in front: what the routes, the Open Inference
Protocol and the bench's in-process baseline all call. Its answers are the HTTP answers, its
checks are the API's 4xx errors, and a request that ends early (deadline, caller gone) leaves
nothing behind in the queue."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from tests.bundles import running_app
from service.inference.errors import ClientClosed, DeadlineExceeded, InvalidInput, QueueFull, TooManyEvidence, TooManyInputs
from service.metrics import Metrics
from service.inference.runtime import CPU, ModelRuntime
from service.settings import Settings
from tests.service.test_engine_batching import _verify_inputs


def _engine(bundle, **settings):
    from service.inference.engine import Engine, warm_up

    s = Settings(model_repository=[bundle.parent], call_overhead_tokens=0.0, **settings)
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    warm_up(runtime, s)
    return Engine(runtime, s, Metrics())


def test_engine_answers_equal_the_http_answers(service_bundles):
    inputs = _verify_inputs(12, seed=5)

    async def over_http():
        async with running_app(Settings(model_repository=service_bundles)) as (_, client):
            r = await client.post("/verify", json={"inputs": inputs, "model": "fever", "explain": True})
            assert r.status_code == 200, r.text
            return r.json()["results"]

    async def in_process():
        engine = _engine(service_bundles / "fever")
        engine.start()
        loop = asyncio.get_running_loop()
        answers = await engine.submit([SimpleNamespace(**x) for x in inputs], deadline=loop.time() + 30,
                                      batch=True, explain=True)
        await engine.drain(5)
        return answers

    http = asyncio.run(over_http())
    answers = asyncio.run(in_process())
    assert len(answers.results) == len(http) == 12
    assert answers.inference_s > 0 and answers.queue_s >= 0
    for got, want in zip(answers.results, http, strict=True):
        assert got["label"] == want["label"] and got["model"] == "fever"
        assert all(abs(got["scores"][k] - want["scores"][k]) < 1e-6 for k in want["scores"])
        assert all(abs(a - b) < 1e-6 for a, b in zip(got["evidence_scores"], want["evidence_scores"], strict=True))
        assert got["explanation"]["tokens"] == want["explanation"]["tokens"]


def test_engine_checks_are_the_api_errors_and_shed_requests_queue_nothing(service_bundles):
    async def scenario():
        engine = _engine(service_bundles / "fever", max_inputs_per_request=4, max_queue=3, max_batch_delay_ms=10_000,
                         max_batch_size=64)
        engine.start()
        deadline = asyncio.get_running_loop().time() + 30
        claim = SimpleNamespace(claim="a dog runs", evidence=["a dog is running"])
        with pytest.raises(TooManyInputs):
            engine.enqueue([claim] * 5, deadline=deadline, batch=True)
        too_many = engine.config.max_evidence + 1
        with pytest.raises(TooManyEvidence, match=r"inputs\[1\]\.evidence"):
            engine.enqueue([claim, SimpleNamespace(claim="x", evidence=["y"] * too_many)], deadline=deadline, batch=True)
        with pytest.raises(InvalidInput, match=r"inputs\[0\]\.claim: no visible character"):
            engine.enqueue([SimpleNamespace(claim="\u200b ", evidence=["y"])], deadline=deadline, batch=True)
        assert engine.depth == 0  # nothing rejected was queued
        held = engine.enqueue([claim, claim], deadline=deadline, batch=True)  # waits out the 10 s delay
        with pytest.raises(QueueFull):
            engine.enqueue([claim, claim], deadline=deadline, batch=True)  # together or not at all
        assert engine.depth == 2
        with pytest.raises(DeadlineExceeded):  # already past: refused before queueing
            engine.enqueue([claim], deadline=asyncio.get_running_loop().time() - 1)
        await engine.drain(5)
        return held

    held = asyncio.run(scenario())
    assert all(f.done() for f in held.futures)


def test_a_request_that_ends_early_is_cancelled_and_never_computed(service_bundles):
    async def scenario():
        engine = _engine(service_bundles / "fever", max_batch_delay_ms=300)
        engine.start()
        loop = asyncio.get_running_loop()
        claim = SimpleNamespace(claim="a dog runs", evidence=["a dog is running"])
        gone = asyncio.Event()
        gone.set()
        with pytest.raises(ClientClosed):  # the caller left before the batch closed
            await engine.submit([claim], deadline=loop.time() + 30, cancel_when=gone.wait())
        with pytest.raises(DeadlineExceeded):  # the deadline passes while the batch waits
            await engine.submit([claim], deadline=loop.time() + 0.05)
        await asyncio.sleep(0.5)  # both batches would have closed by now
        ran = engine.batcher._batches
        answers = await engine.submit([claim], deadline=loop.time() + 30)
        await engine.drain(5)
        return ran, answers

    ran, answers = asyncio.run(scenario())
    assert ran == 0  # neither early-ended input reached onnxruntime
    assert answers.results[0]["label"] in ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
