"""The response cache (issue 54, service/http/cache.py): off by default; on, a repeated request is
answered from it (`x-cache: hit`) with the bytes the model gave; every field that changes the
answer is in the key, unknown fields are not; only 200 answers are kept; the LRU stays within
its bytes; and an answer of one load of a model is never served after a reload."""

from __future__ import annotations

import asyncio

from service.inference import registry
from service.http.cache import ResponseCache
from service.inference.engine import Engine, warm_up
from service.metrics import Metrics
from service.inference.runtime import ModelRuntime
from service.http.schemas import TASK_SCHEMAS
from service.settings import Settings
from tests.bundles import metric_samples, running_app

RerankRequest = TASK_SCHEMAS["rerank"].body  # TEI's request, made from core/tasks/rerank.py

SENTIMENT = {"text": "i loved every minute of this book", "model": "sentiment"}


def cached_settings(service_bundles, **overrides) -> Settings:
    return Settings(model_repository=service_bundles, max_batch_delay_ms=1, response_cache_bytes=1 << 20, **overrides)


def test_off_by_default_no_header_no_cache(service_bundles):
    async def scenario():
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1)) as (app, client):
            answers = [await client.post("/classify", json=SENTIMENT) for _ in range(2)]
            return app.state.service.response_cache, answers

    cache, answers = asyncio.run(scenario())
    assert cache is None
    assert all(a.status_code == 200 and "x-cache" not in a.headers and "x-inference-time" in a.headers for a in answers)


def test_a_repeated_request_is_a_hit_and_the_key_holds_every_field_that_changes_the_answer(service_bundles):
    async def scenario():
        async with running_app(cached_settings(service_bundles)) as (app, client):
            post = lambda body: client.post("/classify", json=body)  # noqa: E731
            out = {
                "first": await post(SENTIMENT),
                "again": await post(SENTIMENT),
                # the same request: fields reordered, defaults sent, an unknown field
                "same": await post({"model": "sentiment", "explain": False, "truncate": True,
                                    "text": SENTIMENT["text"], "request_id": 7}),
                "explain": await post({**SENTIMENT, "explain": True}),
                "explain_again": await post({**SENTIMENT, "explain": True}),
                "other_text": await post({**SENTIMENT, "text": "worst service ever"}),
                "batch_form": await post({"inputs": [{"text": SENTIMENT["text"]}], "model": "sentiment"}),
                "other_model": await post({**SENTIMENT, "model": "topic"}),
                # "truncate": false over the max length: a 422, twice; never stored
                "refused": await post({"text": "word " * 40, "model": "sentiment", "truncate": False}),
                "refused_again": await post({"text": "word " * 40, "model": "sentiment", "truncate": False}),
            }
            out["metrics"] = await client.get("/metrics")
            return app.state.service.response_cache, out

    cache, out = asyncio.run(scenario())
    status = {name: (r.status_code, r.headers.get("x-cache")) for name, r in out.items() if name != "metrics"}
    assert status == {
        "first": (200, "miss"), "again": (200, "hit"), "same": (200, "hit"),
        "explain": (200, "miss"), "explain_again": (200, "hit"), "other_text": (200, "miss"),
        "batch_form": (200, "miss"), "other_model": (200, "miss"),
        "refused": (422, None), "refused_again": (422, None),
    }
    assert out["again"].content == out["first"].content == out["same"].content
    assert "explanation" in out["explain_again"].json() and "explanation" not in out["again"].json()
    assert out["batch_form"].json()["results"][0] == out["first"].json()
    # a hit carries the answer's own headers, not the timings of a run it did not make
    assert out["again"].headers.get("x-attserve-model-version") == out["first"].headers.get("x-attserve-model-version")
    assert "x-inference-time" not in out["again"].headers
    # the ignored field is named on the hit that ignored it
    assert out["same"].headers["x-attserve-ignored-fields"] == "request_id"
    assert len(cache) == 5  # first, explain, other_text, batch_form, other_model
    text = out["metrics"].text
    assert metric_samples(text, "attserve_response_cache_hits_total") == {(("model", "sentiment"),): 3.0}
    assert metric_samples(text, "attserve_response_cache_misses_total") == {
        (("model", "sentiment"),): 6.0, (("model", "topic"),): 1.0}


def test_a_byte_identical_repeat_is_answered_before_validation_with_its_own_headers(service_bundles, monkeypatch):
    from pydantic import TypeAdapter

    body = b'{"text": "i loved every minute of this book", "model": "sentiment", "lang": "en"}'
    validated: list[int] = []
    real = TypeAdapter.validate_json
    monkeypatch.setattr(TypeAdapter, "validate_json", lambda self, *a, **k: validated.append(1) or real(self, *a, **k))

    async def scenario():
        async with running_app(cached_settings(service_bundles)) as (app, client):
            post = lambda: client.post("/classify", content=body, headers={"content-type": "application/json"})  # noqa: E731
            first = await post()
            validations = len(validated)
            again = await post()
            return first, again, len(validated) - validations

    first, again, validations = asyncio.run(scenario())
    assert (first.headers["x-cache"], again.headers["x-cache"]) == ("miss", "hit")
    assert validations == 0  # the same bytes validate the same: the repeat skipped it
    assert again.content == first.content
    assert again.headers["x-attserve-ignored-fields"] == "lang"
    assert "x-inference-time" not in again.headers


def test_the_cache_stays_within_its_bytes_and_evicts_the_least_recently_used():
    metrics = Metrics()
    entry = registry.ModelEntry("m", path=None, load_id=1)  # type: ignore[arg-type]
    entry.version = "1"

    class Body:
        def __init__(self, text):
            self.text = text

        def model_dump_json(self, exclude):
            return f'{{"text":"{self.text}"}}'

    answer = b"x" * 500
    one = ResponseCache.cost(ResponseCache.key(entry, "classify", Body("a")), answer)
    cache = ResponseCache(3 * one, metrics)
    keys = [ResponseCache.key(entry, "classify", Body(t)) for t in "abcd"]
    for key in keys[:3]:
        cache.put(key, answer, {})
    assert cache.get(keys[0]) is not None  # a is now the most recently used
    cache.put(keys[3], answer, {})  # d pushes out b, the least recently used
    assert [cache.get(k) is not None for k in keys] == [True, False, True, True]
    assert cache.bytes == 3 * one <= cache.max_bytes
    cache.put(ResponseCache.key(entry, "classify", Body("huge")), b"y" * (4 * one), {})  # bigger than it all
    assert len(cache) == 3 and cache.bytes == 3 * one
    assert metrics.response_cache_evictions.labels(model="m")._value.get() == 1


def test_the_key_holds_the_rerank_flags_and_the_load():
    entry = registry.ModelEntry("wikiqa", path=None, load_id=1)  # type: ignore[arg-type]
    entry.version = "1"
    base = {"query": "q", "texts": ["a", "b"]}
    keys = {ResponseCache.key(entry, "rerank", RerankRequest.model_validate({**base, **extra}))
            for extra in ({}, {"raw_scores": True}, {"return_text": True}, {"truncate": False})}
    assert len(keys) == 4
    same = ResponseCache.key(entry, "rerank", RerankRequest.model_validate({**base, "model": "wikiqa"}))
    assert same in keys  # the model as resolved is in the key, not as named
    reloaded = registry.ModelEntry("wikiqa", path=None, load_id=2)  # type: ignore[arg-type]
    reloaded.version = "1"
    assert ResponseCache.key(reloaded, "rerank", RerankRequest.model_validate(base)) not in keys


def test_no_stale_answer_survives_a_model_reload(service_bundles):
    """The model is reloaded while serving (here from other weights: the topic bundle's, so the
    answer must change): the request after the reload runs on the new load, never the cached
    answer of the old one."""

    async def reload(service, entry, path):
        # what a reload does (service.inference.registry): a new session warmed up, a new engine, a new load_id
        runtime = await asyncio.to_thread(ModelRuntime.load, path, service.providers, 1)
        await asyncio.to_thread(warm_up, runtime, service.settings)
        engine = Engine(runtime, service.settings, service.metrics)
        engine.start()
        entry.runtime, entry.engine, entry.load_id = runtime, engine, next(registry._LOAD_IDS)

    async def scenario():
        async with running_app(cached_settings(service_bundles)) as (app, client):
            service = app.state.service
            before = [await client.post("/classify", json=SENTIMENT) for _ in range(2)]
            old_load = service.models["sentiment"].load_id
            await reload(service, service.models["sentiment"], service_bundles / "topic")
            after = [await client.post("/classify", json=SENTIMENT) for _ in range(2)]
            return old_load, service.models["sentiment"].load_id, before, after

    old_load, new_load, before, after = asyncio.run(scenario())
    assert new_load != old_load
    assert [r.headers["x-cache"] for r in before + after] == ["miss", "hit", "miss", "hit"]
    assert set(before[0].json()["scores"]) == {"negative", "positive"}
    # the new load's answer (its labels are the topic model's), then that answer from the cache
    assert set(after[0].json()["scores"]) == {"world", "sports", "business", "sci/tech"}
    assert after[1].content == after[0].content != before[1].content

