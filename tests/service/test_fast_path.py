"""The task endpoints' hot path (service.http.entry): a JSON body is answered without FastAPI's
route (its dependency layer and second body read), a 422 of its validation too (the same
message the route gives); anything else falls through to that route, whose answers and error
bodies are the contract; the OpenAPI schema is
FastAPI's, unchanged. A disconnect watcher starts only for a request still waiting after
engine.WATCH_AFTER_S."""

from __future__ import annotations

import asyncio
import json

from fastapi.routing import APIRoute

from service.settings import Settings
from tests.bundles import running_app

JSON = {"content-type": "application/json"}


def test_valid_bodies_skip_fastapis_route_and_the_rest_falls_through(service_bundles, monkeypatch):
    calls: list[str] = []
    handle = APIRoute.handle

    async def counted(self, scope, receive, send):
        if scope.get("method") == "POST":
            calls.append(scope["path"])
        return await handle(self, scope, receive, send)

    monkeypatch.setattr(APIRoute, "handle", counted)

    async def scenario():
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1)) as (app, client):
            out = {
                "single": await client.post("/classify", json={"text": "hello there"}),
                "batch": await client.post("/classify", json={"inputs": [{"text": "a b"}, {"text": "c"}]}),
                "extra": await client.post("/classify", json={"text": "hello", "lang": "en"}),
                "charset": await client.post("/classify", content=b'{"text": "hello"}',
                                             headers={"content-type": "application/json; charset=utf-8"}),
            }
            fast_calls = len(calls)
            out["bad_json"] = await client.post("/classify", content=b'{"text": "a', headers=JSON)
            out["missing"] = await client.post("/entailment", json={"premise": "a"})
            out["form"] = await client.post("/classify", content=b'{"text": "hello"}',
                                            headers={"content-type": "application/x-www-form-urlencoded"})
            out["get"] = await client.get("/verify")
            schema = (await client.get("/openapi.json")).json()
            return out, fast_calls, schema

    out, fast_calls, schema = asyncio.run(scenario())
    for name in ("single", "batch", "extra", "charset"):
        assert out[name].status_code == 200, (name, out[name].text)
    assert fast_calls == 0, "a valid body went through FastAPI's route"
    assert out["single"].json()["label"] and set(out["batch"].json()) == {"results"}
    assert out["extra"].headers["x-attserve-ignored-fields"] == "lang"
    # not JSON, and not sent as JSON: FastAPI's route each; the invalid body's 422 is the hot path's
    assert calls == ["/classify", "/classify"]
    assert out["bad_json"].status_code == 422 and "not valid JSON" in out["bad_json"].json()["error"]["message"]
    assert out["missing"].status_code == 422 and "hypothesis" in out["missing"].json()["error"]["message"]
    assert out["form"].status_code == 415
    assert out["get"].status_code == 405 and out["get"].json()["error"]["allowed_methods"] == ["POST"]
    # the schema still describes the three task endpoints (FastAPI's routes), and nothing else was added
    assert {p for p, ops in schema["paths"].items() if "post" in ops} >= {"/classify", "/entailment", "/verify"}
    assert "ClassifyRequest" in json.dumps(schema)


def test_a_fast_request_starts_no_disconnect_watcher(service_bundles, monkeypatch):
    """Most requests end before engine.WATCH_AFTER_S and never make the watcher task; one that
    waits longer does."""
    import service.inference.engine as engine

    started = []
    ensure_future = asyncio.ensure_future

    def counting(awaitable, **kwargs):
        started.append(awaitable)
        return ensure_future(awaitable, **kwargs)

    monkeypatch.setattr(engine.asyncio, "ensure_future", counting)

    async def scenario():
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1)) as (app, client):
            for _ in range(5):
                assert (await client.post("/classify", json={"text": "hello"})).status_code == 200
            quick = len(started)
            monkeypatch.setattr(engine, "WATCH_AFTER_S", 0.0)
            assert (await client.post("/classify", json={"text": "hello"})).status_code == 200
            await asyncio.sleep(0.05)
            return quick, len(started)

    quick, total = asyncio.run(scenario())
    assert quick == 0
    assert total == 1


def _exchange(settings: Settings, monkeypatch, plain: bool) -> list[tuple[int, dict, dict]]:
    """(status, JSON body, headers without the timing values and date) of a fixed set of
    requests; `plain=False` sends every one down the full stack (the hot path declines it)."""
    from service.http.entry import ServiceEntry

    if not plain:
        monkeypatch.setattr(ServiceEntry, "_plain", lambda self, scope: False)
    requests = [
        ("/classify", {"text": "hello there"}),
        ("/classify", {"inputs": [{"text": "a b"}, {"text": "c", "id": 7}], "source": "x"}),
        ("/entailment", {"premise": "a man sleeps", "hypothesis": "a person rests", "explain": True}),
        ("/classify", {"text": "hello", "model": "no-such-model"}),  # 422 unknown_model, raised by the route
        ("/classify", {"text": "hello", "model": "nli"}),  # 422 wrong_task
        ("/entailment", {"premise": "", "hypothesis": "x"}),  # 422 from the engine's text checks
    ]

    async def scenario():
        async with running_app(settings) as (app, client):
            out = []
            for path, body in requests:
                r = await client.post(path, json=body)
                headers = {k: v for k, v in r.headers.items() if k not in ("date",)}
                for timing in ("x-total-time", "x-queue-time", "x-inference-time"):
                    if timing in headers:
                        headers[timing] = "timed"
                out.append((r.status_code, r.json(), headers))
            return out

    return asyncio.run(scenario())


def test_the_hot_path_answers_as_the_full_stack_does(service_bundles, monkeypatch):
    settings = Settings(model_repository=service_bundles, max_batch_delay_ms=1)
    hot = _exchange(settings, monkeypatch, plain=True)
    full = _exchange(settings, monkeypatch, plain=False)
    assert [status for status, _, _ in hot] == [200, 200, 200, 422, 422, 422]
    for (hs, hb, hh), (fs, fb, fh) in zip(hot, full, strict=True):
        assert (hs, hb) == (fs, fb)
        assert hh == fh


def test_api_keys_and_hosts_are_checked_before_the_hot_path(service_bundles, monkeypatch):
    """A request the Host allow-list or the API keys refuse never reaches the hot path: it is
    answered by their middleware (400, 401); an allowed one is answered hot."""
    from service.http.entry import ServiceEntry

    hot: list[str] = []
    original = ServiceEntry._hot

    async def counted(self, task, scope, receive, send):
        hot.append(scope["path"])
        return await original(self, task, scope, receive, send)

    monkeypatch.setattr(ServiceEntry, "_hot", counted)
    settings = Settings(model_repository=service_bundles, max_batch_delay_ms=1, api_keys="key-one-0123456789",
                        allowed_hosts=["attserve"])
    body = {"text": "hello there"}

    async def scenario():
        async with running_app(settings) as (app, client):
            return (await client.post("/classify", json=body, headers={"authorization": "Bearer key-one-0123456789"}),
                    await client.post("/classify", json=body),
                    await client.post("/classify", json=body, headers={"authorization": "Bearer nope"}),
                    await client.post("/classify", json=body, headers={"authorization": "Bearer key-one-0123456789", "host": "evil.example"}))

    ok, missing, wrong, host = asyncio.run(scenario())
    assert ok.status_code == 200 and hot == ["/classify"]
    assert (missing.status_code, missing.json()["error"]["code"]) == (401, "unauthorized")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (401, "unauthorized")
    assert (host.status_code, host.json()["error"]["code"]) == (400, "invalid_host")


def test_fastapis_opentelemetry_hook_follows_the_setting(service_bundles, monkeypatch):
    """Off by default: FastAPI then looks up no OpenTelemetry provider per request. On, its
    metrics and logs only: traces are service.tracing's (ATTSERVE_OTLP_ENDPOINT), so FastAPI
    never looks its tracer provider up."""
    from opentelemetry import metrics, trace

    lookups: list[int] = []
    tracer_lookups: list[int] = []
    real, real_tracer = metrics.get_meter_provider, trace.get_tracer_provider
    monkeypatch.setattr(metrics, "get_meter_provider", lambda: lookups.append(1) or real())
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: tracer_lookups.append(1) or real_tracer())

    async def scenario(settings):
        async with running_app(settings) as (app, client):
            for _ in range(3):
                assert (await client.post("/classify", json={"text": "hello"})).status_code == 200
            assert (await client.get("/health/live")).status_code == 200

    asyncio.run(scenario(Settings(model_repository=service_bundles, max_batch_delay_ms=1)))
    assert lookups == []
    asyncio.run(scenario(Settings(model_repository=service_bundles, max_batch_delay_ms=1, opentelemetry=True)))
    assert len(lookups) >= 4 and tracer_lookups == []
