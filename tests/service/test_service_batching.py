"""Dynamic batching and load handling, in-process against the real app: isolation of callers
under concurrency, 429 on a full queue, 504 on a passed deadline, 503 while loading, draining
or after a failed load."""

from __future__ import annotations

import asyncio
import logging
import random

import httpx
import pytest

from tests.bundles import CORPUS, copy_repository, metric_samples, running_app
from service.http.app import create_app
from service.settings import Settings

WORDS = sorted({w for line in CORPUS for w in line.split()})


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code and response.json()["error"]["message"]


def _requests(n: int, seed: int = 0) -> list[tuple[str, dict]]:
    """n distinct requests over the three endpoints and both classifiers; lengths vary so
    several length buckets are in play, and every 7th request is a multi-input one."""
    rng = random.Random(seed)
    seen: set[str] = set()

    def text(lo: int, hi: int) -> str:
        while True:
            t = " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
            if t not in seen:
                seen.add(t)
                return t

    def single(kind: int) -> tuple[str, dict]:
        if kind == 0:
            return "/entailment", {"premise": text(2, 30), "hypothesis": text(1, 12)}
        if kind == 1:
            return "/verify", {"claim": text(2, 14), "evidence": [text(1, 22) for _ in range(rng.randint(1, 5))]}
        return "/classify", {"text": text(1, 40), "model": "topic" if kind == 2 else "sentiment"}

    out = []
    for i in range(n):
        path, body = single(i % 4)
        if i % 7 == 0:
            model = body.pop("model", None)
            body = {"inputs": [body] + [single(i % 4)[1] for _ in range(2)]}
            for x in body["inputs"]:
                x.pop("model", None)
            if model:
                body["model"] = model
        out.append((path, body))
    return out


async def _wait_until(condition, timeout_s: float, what: str) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout_s`, so a batcher bug
    fails the test in seconds instead of hanging it until the suite's 600 s per-test timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"{what}: not within {timeout_s} s"
        await asyncio.sleep(0.005)


def _close(a: dict, b: dict) -> bool:
    if "results" in a:
        return len(a["results"]) == len(b["results"]) and all(_close(x, y) for x, y in zip(a["results"], b["results"]))
    ok = a["model"] == b["model"] and a["label"] == b["label"] and a["scores"] == pytest.approx(b["scores"], abs=1e-5)
    if "evidence_scores" in a:
        ok = ok and a["evidence_scores"] == pytest.approx(b["evidence_scores"], abs=1e-5)
    return ok


def test_concurrent_requests_each_get_their_own_answer(service_bundles):
    requests = _requests(300)

    async def solo_answers():
        solo = Settings(model_repository=service_bundles, max_batch_size=1, max_batch_delay_ms=0)
        async with running_app(solo) as (app, client):
            answers = []
            for path, body in requests:
                r = await client.post(path, json=body)
                assert r.status_code == 200, r.text
                answers.append(r.json())
            sizes = metric_samples((await client.get("/metrics")).text, "attserve_batch_size_sum")
            counts = metric_samples((await client.get("/metrics")).text, "attserve_batch_size_count")
            assert sizes == counts  # every batch held exactly one item
            return answers

    async def concurrent_answers():
        batched = Settings(model_repository=service_bundles, max_batch_size=16, max_batch_delay_ms=40,
                           max_queue=4096)
        async with running_app(batched) as (app, client):
            responses = await asyncio.gather(*(client.post(path, json=body) for path, body in requests))
            assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200][:3]
            text = (await client.get("/metrics")).text
            return [r.json() for r in responses], text

    solo = asyncio.run(solo_answers())
    together, metrics_text = asyncio.run(concurrent_answers())
    mismatched = [i for i, (a, b) in enumerate(zip(solo, together)) if not _close(a, b)]
    assert not mismatched, f"{len(mismatched)} answers differ from their solo answer, e.g. #{mismatched[0]}"
    sizes = metric_samples(metrics_text, "attserve_batch_size_sum")
    counts = metric_samples(metrics_text, "attserve_batch_size_count")
    for key, items in sizes.items():
        assert items / counts[key] > 1.5, f"{dict(key)['model']}: mean batch {items / counts[key]:.2f}"
    assert sum(sizes.values()) == sum(len(b.get("inputs", [b])) for _, b in requests)
    buckets = metric_samples(metrics_text, "attserve_batch_size_bucket")
    for (labels, count) in buckets.items():
        if dict(labels)["le"] == "16.0":
            assert count == counts[(("model", dict(labels)["model"]),)]  # never over max_batch_size


def test_requests_arriving_within_the_batch_delay_run_as_one_batch(service_bundles):
    """A batch closes max_batch_delay_ms after its oldest input or when full, not at once: 8
    requests sent 20 ms apart (~140 ms in all) with a 1000 ms delay and max_batch_size 8 run as
    one batch. The margin (a sender 7x slower than planned still makes one batch, and two are
    allowed) keeps a loaded machine from failing it; a batcher that ignores the delay runs each
    request alone (8 batches)."""
    async def scenario():
        s = Settings(model_repository=service_bundles, max_batch_size=8, max_batch_delay_ms=1000)
        async with running_app(s) as (app, client):
            before = (await client.get("/metrics")).text  # warm-up batches are not this test's
            sent = []
            for i in range(8):
                sent.append(asyncio.ensure_future(
                    client.post("/classify", json={"text": f"the team won the cup {i}", "model": "topic"})))
                await asyncio.sleep(0.02)
            responses = await asyncio.wait_for(asyncio.gather(*sent), 30)
            text = (await client.get("/metrics")).text
            return responses, before, text

    responses, before, text = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [200] * 8, [r.text for r in responses]

    def added(name: str) -> float:
        key = (("model", "topic"),)
        return metric_samples(text, name)[key] - metric_samples(before, name).get(key, 0)

    batches = added("attserve_batch_size_count")
    assert added("attserve_batch_size_sum") == 8  # each request's input ran once
    assert batches <= 2, f"8 requests 20 ms apart ran as {batches:.0f} batches with a 1000 ms delay"


def test_full_queue_is_429_with_retry_after(service_bundles):
    async def scenario():
        s = Settings(model_repository=service_bundles, max_queue=2, max_batch_size=64, max_batch_delay_ms=1500)
        async with running_app(s) as (app, client):
            engine = app.state.service.models["topic"].engine
            first = asyncio.ensure_future(client.post("/classify", json={"inputs": [{"text": "a"}, {"text": "b"}],
                                                                         "model": "topic"}))
            # the two inputs stay queued for the 1500 ms batch delay; a batcher that ignores it
            # empties the queue at once (this wait hung the test for its whole timeout then)
            await _wait_until(lambda: engine.depth >= 2, 10, "the first request's 2 inputs queued")
            r = await client.post("/classify", json={"text": "one more", "model": "topic"})
            assert_error(r, 429, "queue_full")
            assert int(r.headers["retry-after"]) >= 1
            depth = metric_samples((await client.get("/metrics")).text, "attserve_queue_depth")
            assert depth[(("model", "topic"),)] == 2
            # the other models have their own queues
            assert (await client.post("/classify", json={"text": "x", "model": "sentiment"})).status_code == 200
            assert (await first).status_code == 200
            assert (await client.post("/classify", json={"text": "now it fits", "model": "topic"})).status_code == 200

    asyncio.run(scenario())


def test_deadline_passed_in_queue_is_504_and_never_computed(service_bundles):
    async def scenario():
        s = Settings(model_repository=service_bundles, request_timeout_ms=100, max_batch_delay_ms=600)
        async with running_app(s) as (app, client):
            r = await client.post("/entailment", json={"premise": "a", "hypothesis": "b"})
            assert_error(r, 504, "deadline_exceeded")
            await asyncio.sleep(0.8)  # the batch would have closed by now
            text = (await client.get("/metrics")).text
            assert metric_samples(text, "attserve_batch_size_count").get((("model", "nli"),), 0) == 0
            dropped = metric_samples(text, "attserve_dropped_items_total")
            assert sum(v for k, v in dropped.items() if dict(k)["model"] == "nli") == 1
            requests = metric_samples(text, "attserve_requests_total")
            assert requests[(("endpoint", "entailment"), ("model", "nli"), ("status", "504"))] == 1

    asyncio.run(scenario())


def test_not_ready_before_models_are_loaded(service_bundles):
    async def scenario():
        app = create_app(Settings(model_repository=service_bundles))
        # lifespan not started: nothing is loaded or warm yet
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            assert (await client.get("/health/live")).status_code == 200
            r = await client.get("/health/ready")
            assert_error(r, 503, "not_ready")
            assert_error(await client.post("/classify", json={"text": "hello"}), 503, "not_ready")

    asyncio.run(scenario())


def test_draining_refuses_new_work(service_bundles):
    async def scenario():
        async with running_app(Settings(model_repository=service_bundles)) as (app, client):
            assert (await client.get("/health/ready")).status_code == 200
            app.state.service.begin_drain()
            assert_error(await client.post("/classify", json={"text": "late"}), 503, "shutting_down")
            assert_error(await client.get("/health/ready"), 503, "shutting_down")
            assert (await client.get("/health/live")).status_code == 200

    asyncio.run(scenario())


def test_altered_bundle_is_refused_and_named(service_bundles, tmp_path, caplog):
    repo = copy_repository(service_bundles, tmp_path / "repo", ["nli", "sentiment"])
    model = repo / "nli" / "model.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))

    async def scenario():
        async with running_app(Settings(model_repository=repo, allow_partial_start=True)) as (app, client):
            assert_error(await client.get("/health/ready"), 503, "not_ready")
            models = {m["name"]: m for m in (await client.get("/v1/models")).json()["models"]}
            # clients see the path inside the repository, never the server's; the log keeps it
            assert models["nli"]["status"] == "failed" and "nli/model.onnx" in models["nli"]["error"]
            assert str(tmp_path) not in models["nli"]["error"]
            assert models["sentiment"]["status"] == "ready"
            # the healthy model keeps serving; the broken one answers 503 when named, and its
            # task, with no model left, 404 (not a 503 a load balancer would retry)
            assert (await client.post("/classify", json={"text": "fine"})).status_code == 200
            assert_error(await client.post("/entailment", json={"premise": "a", "hypothesis": "b", "model": "nli"}),
                         503, "not_ready")
            assert_error(await client.post("/entailment", json={"premise": "a", "hypothesis": "b"}),
                         404, "no_model_for_task")

    with caplog.at_level(logging.ERROR, logger="service.inference.registry"):
        asyncio.run(scenario())
    lines = [r for r in caplog.records if r.getMessage() == "model failed to load"]
    assert len(lines) == 1 and lines[0].model == "nli" and str(model) in lines[0].error
    assert "sha256" in lines[0].error


def test_no_loadable_model_is_not_ready(tmp_path, service_bundles):
    async def scenario(repo):
        async with running_app(Settings(model_repository=repo, allow_partial_start=True)) as (app, client):
            assert (await client.get("/health/live")).status_code == 200
            assert_error(await client.get("/health/ready"), 503, "not_ready")
            r = await client.post("/classify", json={"text": "x"})
            assert_error(r, 404, "no_model_for_task")
            assert "no classification model" in r.json()["error"]["message"]
            listed = (await client.get("/v1/models")).json()
            assert listed["tasks"]["classification"]["default"] is None
            assert [(m["name"], m["status"]) for m in listed["models"]] == [("topic", "failed")]

    broken = copy_repository(service_bundles, tmp_path / "broken", ["topic"])
    (broken / "topic" / "config.json").write_text("{}")
    asyncio.run(scenario(broken))
