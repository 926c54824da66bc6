"""Start-up fails fast on configuration mistakes, a task without a model is 404, and the
default model of a task is explicit or stated."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bundles import copy_repository, running_app
from service.http.app import create_app
from service.inference.registry import StartupError
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _discover(**settings):
    service = create_app(Settings(**settings)).state.service
    service.discover()
    return service


def test_a_mistyped_allow_listed_model_stops_start_up_naming_the_bundles(service_bundles):
    with pytest.raises(StartupError) as caught:
        _discover(model_repository=service_bundles, models=["topic", "topicc"])
    message = str(caught.value)
    assert "topicc" in message and "not found" in message
    assert "bundles there: fever, nli, sentiment, topic" in message
    # partial start-up is about broken bundles, never about a typo
    with pytest.raises(StartupError, match="topicc"):
        _discover(model_repository=service_bundles, models=["topicc"], allow_partial_start=True)


def test_an_empty_or_missing_repository_stops_start_up(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(StartupError, match="no bundle .* in .*empty"):
        _discover(model_repository=tmp_path / "empty")
    with pytest.raises(StartupError, match="nowhere is not a directory"):
        _discover(model_repository=tmp_path / "nowhere")


def test_an_invalid_bundle_stops_start_up_unless_partial_start_is_allowed(service_bundles, tmp_path):
    repo = copy_repository(service_bundles, tmp_path / "repo", ["topic", "nli"])
    (repo / "nli" / "config.json").write_text("{}")
    with pytest.raises(StartupError) as caught:
        _discover(model_repository=repo)
    assert "nli/config.json" in str(caught.value) and "ATTSERVE_ALLOW_PARTIAL_START=true" in str(caught.value)
    service = _discover(model_repository=repo, allow_partial_start=True)
    assert service.models["nli"].status == "failed" and service.models["topic"].status == "loading"


def test_a_bundle_failing_to_load_is_fatal_unless_partial_start_is_allowed(service_bundles, tmp_path):
    repo = copy_repository(service_bundles, tmp_path / "repo", ["topic", "nli"])
    model = repo / "nli" / "model.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))

    async def scenario(allow: bool):
        fatal = []
        app = create_app(Settings(model_repository=repo, allow_partial_start=allow))
        app.state.service.on_fatal = fatal.append
        service = app.state.service
        service.discover()
        await service.load_all()
        await service.shutdown()
        return service.fatal, fatal

    fatal, called = asyncio.run(scenario(False))
    assert fatal is not None and "nli/model.onnx" in fatal and "sha256" in fatal and called == [fatal]
    fatal, called = asyncio.run(scenario(True))
    assert fatal is None and called == []


def _serve(env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service"], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "ATTSERVE_PORT": "0", **env})


def test_the_process_exits_with_the_reason(service_bundles, tmp_path):
    result = _serve({"ATTSERVE_MODEL_REPOSITORY": str(service_bundles), "ATTSERVE_MODELS": "sentimentt"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "sentimentt" in result.stderr and "bundles there: fever, nli, sentiment, topic" in result.stderr
    assert "Traceback" not in result.stderr

    repo = copy_repository(service_bundles, tmp_path / "repo", ["topic"])
    (repo / "topic" / "tokenizer.json").unlink()  # found at load time, after the port opened
    result = _serve({"ATTSERVE_MODEL_REPOSITORY": str(repo)})
    assert result.returncode == 3, result.stderr[-2000:]
    assert "topic/tokenizer.json" in result.stderr and "ATTSERVE_ALLOW_PARTIAL_START" in result.stderr


def test_a_task_without_a_model_is_404_and_listed(service_bundles, tmp_path):
    repo = copy_repository(service_bundles, tmp_path / "repo", ["topic"])

    async def scenario():
        async with running_app(Settings(model_repository=repo)) as (app, client):
            r = await client.post("/entailment", json={"premise": "a", "hypothesis": "b"})
            assert r.status_code == 404 and r.json()["error"]["code"] == "no_model_for_task", r.text
            assert "classification" in r.json()["error"]["message"]  # says what is served
            assert (await client.post("/classify", json={"text": "hello"})).status_code == 200
            tasks = (await client.get("/v1/models")).json()["tasks"]
            assert tasks["entailment"] == {"endpoint": "/entailment", "models": [], "default": None,
                                           "default_reason": None}
            assert tasks["classification"]["default"] == "topic"
            assert tasks["classification"]["default_reason"] == "the only classification model served"
    asyncio.run(scenario())


def _models(repo: Path, **over):
    async def scenario():
        async with running_app(Settings(model_repository=repo, **over)) as (app, client):
            body = (await client.get("/v1/models")).json()
            return {m["name"]: m for m in body["models"]}, body["tasks"]
    return asyncio.run(scenario())


def test_the_default_model_is_explicit_or_stated(service_bundles, tmp_path, caplog):
    repo = copy_repository(service_bundles, tmp_path / "repo", ["topic", "sentiment"])
    # no default set: the old rule (both record 0.0 test accuracy: name order), stated
    with caplog.at_level(logging.INFO, logger="service.inference.registry"):
        models, tasks = _models(repo)
    assert tasks["classification"]["default"] == "sentiment" and models["sentiment"]["default"]
    assert "no default set" in models["sentiment"]["default_reason"]
    assert models["topic"]["default_reason"] is None and not models["topic"]["default"]
    logged = [r for r in caplog.records if r.getMessage() == "default model"]
    assert [(r.task, r.model) for r in logged] == [("classification", "sentiment")]
    assert "no default set" in logged[0].reason

    # `"default": true` in a bundle's config.json wins over the recorded accuracy
    config = json.loads((repo / "topic" / "config.json").read_text())
    (repo / "topic" / "config.json").write_text(json.dumps({**config, "default": True}))
    models, tasks = _models(repo)
    assert tasks["classification"]["default"] == "topic" and models["topic"]["default"]
    assert "config.json" in models["topic"]["default_reason"]

    # and the environment variable wins over both
    models, tasks = _models(repo, default_classification_model="sentiment")
    assert tasks["classification"]["default"] == "sentiment"
    assert models["sentiment"]["default_reason"] == "set by ATTSERVE_DEFAULT_CLASSIFICATION_MODEL"


def test_several_repositories_are_served_side_by_side(service_bundles, tmp_path):
    first = copy_repository(service_bundles, tmp_path / "first", ["topic"])
    second = copy_repository(service_bundles, tmp_path / "second", ["nli"])
    models, tasks = _models(f"{first},{second}")
    assert {n: m["status"] for n, m in models.items()} == {"topic": "ready", "nli": "ready"}
    # the same name in two repositories is refused (start-up stops without partial start)
    copy_repository(service_bundles, tmp_path / "third", ["topic"])
    with pytest.raises(StartupError, match="model 'topic' version 'test-4' is in 2 folders"):
        _discover(model_repository=f"{first},{tmp_path / 'third'}")


def test_the_root_is_a_short_index(service_bundles):
    async def scenario():
        async with running_app(Settings(model_repository=service_bundles, docs=True)) as (app, client):
            r = await client.get("/")
            assert r.status_code == 200, r.text
            index = r.json()
            assert index["name"] == "attserve" and index["version"] and index["docs"] == "/docs"
            assert {"POST /classify", "POST /entailment", "POST /verify", "GET /v1/models"} <= set(index["endpoints"])
            assert (await client.get(index["docs"])).status_code == 200
    asyncio.run(scenario())


def test_a_default_model_setting_naming_no_served_model_stops_start_up(service_bundles):
    with pytest.raises(StartupError) as caught:
        _discover(model_repository=service_bundles, default_classification_model="sentimentt")
    assert "ATTSERVE_DEFAULT_CLASSIFICATION_MODEL=sentimentt" in str(caught.value)
    assert "served: sentiment, topic" in str(caught.value)
    with pytest.raises(StartupError, match="not a served entailment model"):
        _discover(model_repository=service_bundles, default_entailment_model="topic")  # another task's model
