"""The task endpoints' hot path (service.fastpath, issue 37): a valid JSON body is answered
without FastAPI's route (its dependency layer and second body read), anything else falls
through to that route, whose answers and error bodies are the contract; the OpenAPI schema is
FastAPI's, unchanged. A disconnect watcher starts only for a request still waiting after
engine.WATCH_AFTER_S."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from fastapi.routing import APIRoute

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bundles import running_app  # noqa: E402
from service.settings import Settings  # noqa: E402

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
    assert calls == ["/classify", "/entailment", "/classify"]  # the three refusals, FastAPI's route each
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
    import service.engine as engine

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
