"""The HTTP contract, in-process (httpx + ASGI transport, lifespan running): answer shapes,
labels from the bundles, model selection, truncation, timing headers, /v1/models, /metrics,
OpenAPI, and every error status with its JSON body."""

from __future__ import annotations

import asyncio
import json
import logging
import math

import httpx
import pytest

from tests.bundles import SPECS, metric_samples, running_app
from service.http.app import create_app
from service.inference.runtime import DeviceUnavailable
from service.settings import Settings

LABELS = {s.name: list(s.labels) for s in SPECS}


def settings(repo, **over) -> Settings:
    return Settings(model_repository=repo, max_batch_delay_ms=1, **over)


def assert_prediction(answer: dict, model: str) -> None:
    assert answer["model"] == model
    assert list(answer["scores"]) == LABELS[model]
    assert math.isclose(sum(answer["scores"].values()), 1.0, abs_tol=1e-6)
    assert all(0.0 <= p <= 1.0 for p in answer["scores"].values())
    assert answer["label"] == max(answer["scores"], key=answer["scores"].get)
    assert isinstance(answer["truncated"], bool)
    assert 0.0 <= answer["unknown_token_share"] <= 1.0


def assert_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
    return body


def timing_headers(response: httpx.Response) -> tuple[float, float, float]:
    """(x-total-time, x-queue-time, x-inference-time) in ms."""
    return tuple(float(response.headers[h]) for h in ("x-total-time", "x-queue-time", "x-inference-time"))


def assert_timing_headers(response: httpx.Response) -> None:
    """One input: queue wait then inference, both inside the request's total time (each header
    is rounded to 1 us). Breaks if the total is taken before the answer is ready, if either
    part is counted twice or in the wrong unit (s vs ms), or if a part is negative."""
    total, queue, inference = timing_headers(response)
    assert queue >= 0.0 and inference > 0.0, (total, queue, inference)
    assert total >= queue + inference - 0.002, (total, queue, inference)


def test_endpoints_single_and_batch(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            r = await client.post("/entailment", json={"premise": "a man is playing a guitar .",
                                                        "hypothesis": "nobody is playing music ."})
            assert r.status_code == 200
            assert_prediction(r.json(), "nli")  # the only entailment model is the default
            assert_timing_headers(r)

            pairs = [{"premise": "two dogs run", "hypothesis": "dogs are running"},
                     {"premise": "the children are sleeping", "hypothesis": "children play outside"}]
            r = await client.post("/entailment", json={"inputs": pairs, "model": "nli"})
            results = r.json()["results"]
            assert len(results) == 2
            for res in results:
                assert_prediction(res, "nli")
            solo = [(await client.post("/entailment", json=p)).json() for p in pairs]
            for one, res in zip(solo, results):
                assert one["scores"] == pytest.approx(res["scores"], abs=1e-5)

            evidence = ["paris is the capital of france .", "berlin is a city .", "the moon orbits the earth ."]
            r = await client.post("/verify", json={"claim": "paris is in france", "evidence": evidence})
            answer = r.json()
            assert_prediction(answer, "fever")
            assert len(answer["evidence_scores"]) == 3 and all(isinstance(s, float) for s in answer["evidence_scores"])
            # input order: reversing the evidence reverses the scores
            r = await client.post("/verify", json={"claim": "paris is in france", "evidence": evidence[::-1]})
            assert r.json()["evidence_scores"] == pytest.approx(answer["evidence_scores"][::-1], abs=1e-5)
            r = await client.post("/verify", json={"inputs": [{"claim": "paris", "evidence": evidence[:1]},
                                                              {"claim": "moon", "evidence": evidence}]})
            results = r.json()["results"]
            assert [len(x["evidence_scores"]) for x in results] == [1, 3]
            assert results[0]["evidence_scores"] == pytest.approx([1.0])

            # two classifiers of equal (untrained) accuracy: the default is the first in name order
            r = await client.post("/classify", json={"text": "the team won the championship"})
            assert_prediction(r.json(), "sentiment")
            r = await client.post("/classify", json={"text": "the team won the championship", "model": "topic"})
            assert_prediction(r.json(), "topic")
            r = await client.post("/classify", json={"inputs": [{"text": "i loved this book"}, {"text": "dull plot"},
                                                                {"text": "stock market fell"}], "model": "topic"})
            results = r.json()["results"]
            assert len(results) == 3 and all(x["model"] == "topic" for x in results)

    asyncio.run(scenario())


def test_default_model_is_the_most_accurate_of_its_task_unless_set(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            service = app.state.service
            assert service.default_name("classification") == "sentiment"  # equal accuracy: name order
            topic = service.models["topic"].config
            service.models["topic"].config = topic.model_copy(update={"metrics": {"test": {"accuracy": 0.9}}})
            assert service.default_name("classification") == "topic"
            r = await client.post("/classify", json={"text": "parliament passed the budget"})
            assert r.json()["model"] == "topic"
            listed = {m["name"]: m["default"] for m in (await client.get("/v1/models")).json()["models"]}
            assert listed["topic"] is True and listed["sentiment"] is False
        async with running_app(settings(service_bundles, default_classification_model="sentiment")) as (app, client):
            service = app.state.service
            topic = service.models["topic"].config
            service.models["topic"].config = topic.model_copy(update={"metrics": {"test": {"accuracy": 0.9}}})
            assert (await client.post("/classify", json={"text": "budget"})).json()["model"] == "sentiment"

    asyncio.run(scenario())


def test_default_model_from_settings_and_truncation(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, default_classification_model="topic")) as (app, client):
            r = await client.post("/classify", json={"text": "parliament passed the budget"})
            assert_prediction(r.json(), "topic")
            assert r.json()["truncated"] is False
            long_text = " ".join(["the team won the championship after extra time ."] * 10)  # > 32 tokens
            r = await client.post("/classify", json={"inputs": [{"text": long_text}, {"text": "short text"}]})
            assert [x["truncated"] for x in r.json()["results"]] == [True, False]
            # everything after the max length is ignored: a different tail gives the same answer
            cut = " ".join(long_text.split()[:32])
            r2 = await client.post("/classify", json={"text": cut + " completely different ending"})
            assert r2.json()["scores"] == pytest.approx(r.json()["results"][0]["scores"], abs=1e-6)
            r = await client.post("/verify", json={"claim": "a", "evidence": ["b", long_text]})
            assert r.json()["truncated"] is True
            text = (await client.get("/metrics")).text
            assert metric_samples(text, "attserve_truncated_inputs_total")[(("model", "topic"),)] == 2
            assert metric_samples(text, "attserve_truncated_inputs_total")[(("model", "fever"),)] == 1

    asyncio.run(scenario())


def test_models_metrics_and_docs(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, docs=True)) as (app, client):
            # liveness says only that the process answers; the models are /health/ready's
            assert (await client.get("/health/live")).json() == {"status": "alive"}
            ready = await client.get("/health/ready")
            assert ready.status_code == 200 and set(ready.json()["models"]) == {"nli", "fever", "sentiment", "topic"}

            models = {m["name"]: m for m in (await client.get("/v1/models")).json()["models"]}
            assert set(models) == {"nli", "fever", "sentiment", "topic"}
            for spec in SPECS:
                m = models[spec.name]
                assert m["status"] == "ready" and m["task"] == spec.task and m["labels"] == list(spec.labels)
                assert m["provider"] == "CPUExecutionProvider"
                assert m["architecture"] == "attconv-light" and m["version"] == f"test-{spec.seed}"
                assert m["max_lengths"] == spec.max_lengths and m["max_evidence"] == spec.max_evidence
                assert m["metrics"]["test"]["accuracy"] == 0.0
            assert models["sentiment"]["default"] and not models["topic"]["default"]

            await client.post("/classify", json={"inputs": [{"text": "a"}, {"text": "b"}]})
            await client.post("/classify", json={"text": " "})
            text = (await client.get("/metrics")).text
            info = metric_samples(text, "attserve_model_info")
            assert len(info) == 4 and all(dict(k)["provider"] == "CPUExecutionProvider" for k in info)
            requests = metric_samples(text, "attserve_requests_total")
            assert requests[(("endpoint", "classify"), ("model", "sentiment"), ("status", "200"))] == 1
            assert requests[(("endpoint", "classify"), ("model", ""), ("status", "422"))] == 1
            assert metric_samples(text, "attserve_inputs_total")[(("endpoint", "classify"), ("model", "sentiment"))] == 2
            for name in ("attserve_request_duration_seconds_count", "attserve_queue_wait_seconds_count",
                         "attserve_inference_duration_seconds_count", "attserve_batch_size_count",
                         "attserve_batch_tokens_count", "attserve_queue_depth"):
                assert metric_samples(text, name), name

            spec = (await client.get("/openapi.json")).json()
            assert {"/entailment", "/verify", "/classify", "/v1/models", "/health/ready"} <= set(spec["paths"])
            assert (await client.get("/docs")).status_code == 200
            # a 404 lists the endpoints, /docs included where it is enabled
            listed = assert_error(await client.get("/nope"), 404, "not_found")["error"]["endpoints"]
            assert {"POST /classify", "POST /entailment", "POST /verify", "GET /v1/models", "GET /health/live",
                    "GET /health/ready", "GET /metrics", "GET /ui", "GET /docs", "GET /openapi.json",
                    "POST /v2/models/{name}/infer"} <= set(listed)
            assert spec["paths"]["/health/live"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] \
                == {"$ref": "#/components/schemas/LiveStatus"}
            assert set(spec["components"]["schemas"]["LiveStatus"]["properties"]) == {"status"}

    asyncio.run(scenario())


def test_invalid_input_errors(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, max_inputs_per_request=3)) as (app, client):
            cases = [
                ("/classify", {"text": "   "}, "invalid_input"),
                ("/classify", {"text": ""}, "invalid_input"),
                ("/classify", {"text": 42}, "invalid_input"),
                ("/classify", {"text": "ok", "modle": "topic"}, "invalid_input"),
                ("/classify", {"inputs": []}, "invalid_input"),
                ("/classify", {"inputs": [{"text": "a"}, {"text": "\t"}]}, "invalid_input"),
                ("/entailment", {"premise": "a"}, "invalid_input"),
                ("/verify", {"claim": "a", "evidence": []}, "invalid_input"),
                ("/verify", {"claim": "a", "evidence": "not a list"}, "invalid_input"),
                ("/verify", {"claim": "a", "evidence": ["e"] * 6}, "too_many_evidence"),
                ("/verify", {"inputs": [{"claim": "a", "evidence": ["e"]}, {"claim": "b", "evidence": ["e"] * 6}]},
                 "too_many_evidence"),
                ("/classify", {"inputs": [{"text": "a"}] * 4}, "too_many_inputs"),
                ("/classify", {"text": "a", "model": "nope"}, "unknown_model"),
                ("/classify", {"text": "a", "model": "nli"}, "wrong_task"),
                ("/entailment", {"premise": "a", "hypothesis": "b", "model": "fever"}, "wrong_task"),
            ]
            for path, body, code in cases:
                assert_error(await client.post(path, json=body), 422, code)
            r = await client.post("/classify", content=b"{not json", headers={"content-type": "application/json"})
            assert_error(r, 422, "invalid_input")
            missing = assert_error(await client.get("/no/such/route"), 404, "not_found")["error"]
            assert "GET /no/such/route" in missing["message"] and "POST /classify" in missing["message"]
            assert "POST /classify" in missing["endpoints"] and "GET /v1/models" in missing["endpoints"]
            assert "GET /docs" not in missing["endpoints"]  # ATTSERVE_DOCS is off here
            wrong = await client.get("/classify")
            assert wrong.headers["allow"] == "POST"
            error = wrong.json()["error"]
            assert error["code"] == "method_not_allowed" and error["allowed_methods"] == ["POST"]
            assert error["message"] == "GET is not allowed on /classify; it takes POST"
            error = (await client.delete("/v1/models")).json()["error"]
            assert error["allowed_methods"] == ["GET"] and "DELETE is not allowed on /v1/models" in error["message"]
            # a missing static file of the page: the same JSON 404
            assert assert_error(await client.get("/ui/no-such-file.js"), 404, "not_found")["error"]["endpoints"]
            # the Open Inference Protocol keeps its own error form, with its endpoints in the message
            v2 = await client.get("/v2/no/such/route")
            assert v2.status_code == 404 and set(v2.json()) == {"error"} and isinstance(v2.json()["error"], str)
            assert "POST /v2/models/{name}/infer" in v2.json()["error"] and "/classify" not in v2.json()["error"]
            v2 = await client.get("/v2/models/nli/infer")
            assert v2.status_code == 405 and v2.json() == {"error": "GET is not allowed on /v2/models/nli/infer; it takes POST"}
            # nothing bad reached a batch
            text = (await client.get("/metrics")).text
            assert sum(metric_samples(text, "attserve_batch_size_count").values()) == 0

    asyncio.run(scenario())


def test_body_too_large(service_bundles):
    async def scenario():
        async with running_app(settings(service_bundles, max_body_bytes=300)) as (app, client):
            big = {"text": "word " * 100}
            error = assert_error(await client.post("/classify", json=big), 413, "body_too_large")["error"]
            assert error["message"] == "request body over 300 bytes (limit set by ATTSERVE_MAX_BODY_BYTES)"

            async def chunks():  # no Content-Length: the streamed size decides
                for _ in range(10):
                    yield b'{"text": "' + b"a" * 50
            r = await client.post("/classify", content=chunks(), headers={"content-type": "application/json"})
            assert "content-length" not in r.request.headers
            assert_error(r, 413, "body_too_large")

            async def small():
                yield b'{"text": '
                yield b'"fine"}'
            r = await client.post("/classify", content=small(), headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            requests = metric_samples((await client.get("/metrics")).text, "attserve_requests_total")
            assert requests[(("endpoint", "classify"), ("model", ""), ("status", "413"))] == 2

    asyncio.run(scenario())


def test_unexpected_exception_is_a_json_500_and_the_server_goes_on(service_bundles, caplog):
    async def scenario():
        async with running_app(settings(service_bundles), raise_app_exceptions=False) as (app, client):
            async def broken() -> None:
                raise RuntimeError("bug in a handler")

            app.add_api_route("/broken", broken)
            with caplog.at_level(logging.ERROR, logger="service.http.errors"):
                assert_error(await client.get("/broken"), 500, "internal_error")
            assert any("unexpected error" in r.getMessage() and r.exc_info for r in caplog.records)
            assert (await client.post("/classify", json={"text": "still serving"})).status_code == 200

    asyncio.run(scenario())


def test_cuda_requested_without_gpu_fails_at_start(tmp_path):
    with pytest.raises(DeviceUnavailable, match="ATTSERVE_DEVICE=cuda.*CUDAExecutionProvider"):
        create_app(Settings(model_repository=tmp_path, device="cuda"))


def test_settings_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTSERVE_MODELS", "topic, nli")
    monkeypatch.setenv("ATTSERVE_MAX_BATCH_SIZE", "7")
    monkeypatch.setenv("ATTSERVE_MODEL_REPOSITORY", str(tmp_path))
    monkeypatch.setenv("ATTSERVE_DEVICE", "cpu")
    s = Settings()
    assert s.models == ["topic", "nli"] and s.max_batch_size == 7 and s.model_repository == [tmp_path]
    # several repositories: commas or colons
    monkeypatch.setenv("ATTSERVE_MODEL_REPOSITORY", f"{tmp_path}/a, {tmp_path}/b:{tmp_path}/c")
    assert Settings().model_repository == [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    monkeypatch.setenv("ATTSERVE_MODEL_REPOSITORY", str(tmp_path))
    assert s.threads_per_model(64) == 1 and json.loads(s.model_dump_json())["device"] == "cpu"
    monkeypatch.setenv("ATTSERVE_DEVICE", "tpu")
    with pytest.raises(ValueError):
        Settings()


def test_scores_are_the_softmax_of_the_graph_logits(service_bundles):
    """The answer is computed off the event loop, per batch (runtime.infer); check it against
    onnxruntime run directly on the bundle's graph, one pair, no padding."""
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    bundle = service_bundles / "nli"
    config = json.loads((bundle / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    pair = {"premise": "two dogs run across a snowy field .", "hypothesis": "animals are outside ."}
    feeds = {name: np.array([tokenizer.encode(pair[field], add_special_tokens=False).ids], dtype=np.int64)
             for name, field in zip(config["inputs"], ("premise", "hypothesis"))}
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    logits = session.run(None, feeds)[0][0].astype(np.float64)  # (C,)
    want = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()

    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            answers = [(await client.post("/entailment", json=pair)).json(),
                       (await client.post("/entailment", json={"inputs": [pair, {"premise": "a b c d e f g h i j k",
                                                                                 "hypothesis": "x"}]})).json()["results"][0]]
            for answer in answers:
                assert list(answer["scores"].values()) == pytest.approx(want.tolist(), abs=1e-5)
                assert answer["label"] == config["labels"][int(np.argmax(logits))]

    asyncio.run(scenario())


def test_objects_alive_at_ready_are_frozen_out_of_the_collector(service_bundles):
    """Full collections would otherwise walk the models, sessions and app on every pass
    (24-36 ms pauses measured under load); after start-up they are in the permanent generation."""
    import gc

    gc.unfreeze()

    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            assert (await client.get("/health/ready")).status_code == 200
            runtime = app.state.service.models["nli"].runtime
            assert gc.get_freeze_count() > 1000
            assert not any(o is runtime for o in gc.get_objects())  # frozen objects are not listed
            fresh = [[1], [2]]  # lists are always tracked
            assert any(o is fresh for o in gc.get_objects())  # what requests allocate still is collected

    asyncio.run(scenario())


def test_queue_time_header_includes_the_batch_delay(service_bundles):
    """A lone input waits max_batch_delay_ms for company before its batch closes: x-queue-time
    shows that wait, and x-total-time contains it. Breaks if the queue time is measured from
    the batch's start instead of the input's arrival (reads ~0), if the batcher runs without
    waiting for the delay, or if the header reports seconds as milliseconds."""
    delay_ms = 80

    async def scenario():
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=delay_ms,
                                        max_batch_size=32)) as (app, client):
            return [await client.post("/classify", json={"text": f"the film was dull {i} .", "model": "sentiment"})
                    for i in range(2)]
    for r in asyncio.run(scenario()):
        assert r.status_code == 200, r.text
        total, queue, inference = timing_headers(r)
        assert queue >= delay_ms - 0.01, (total, queue, inference)
        assert queue < delay_ms + 2000, (total, queue, inference)
        assert_timing_headers(r)


def test_unknown_token_share_counts_the_tokens_outside_the_vocabulary(service_bundles):
    """Every answer says what share of the tokens the model read are outside its vocabulary
    ([UNK] or a hashed bucket), every text of the input together: the tokens the explanation
    marks `unknown`, counted from the ids already encoded."""
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            async def share(path, body):
                r = await client.post(path, json=body)
                assert r.status_code == 200, r.text
                return r.json()

            assert (await share("/classify", {"text": "a man is playing a guitar on the stage ."}))["unknown_token_share"] == 0.0
            assert (await share("/classify", {"text": "zqxj vbnmq wrtpl"}))["unknown_token_share"] == 1.0
            answer = await share("/classify", {"text": "a man is playing a zzqx", "explain": True})
            assert answer["unknown_token_share"] == round(1 / 6, 4)
            tokens = answer["explanation"]["tokens"]["text"]
            assert answer["unknown_token_share"] == round(sum(t["unknown"] for t in tokens) / len(tokens), 4)
            # verification: the claim and every evidence sentence together (3 + 2 + 3 tokens, 2 unknown)
            answer = await share("/verify", {"claim": "two dogs run", "evidence": ["qqqq zzzz", "the team won"]})
            assert answer["unknown_token_share"] == 0.25
            # pairs: premise and hypothesis together (5 + 2 tokens, 2 unknown); batch answers carry it too
            batch = await share("/entailment", {"inputs": [{"premise": "a man is playing music", "hypothesis": "xxqv zzqv"},
                                                           {"premise": "a man", "hypothesis": "a man"}]})
            assert [r["unknown_token_share"] for r in batch["results"]] == [round(2 / 7, 4), 0.0]
            # only the tokens the model reads count (max length 32 here): in-vocabulary words, then gibberish past it
            long = await share("/classify", {"text": "the team won " * 10 + "qqqq " * 50})
            assert long["truncated"] and long["unknown_token_share"] == round(2 / 32, 4)

            schema = (await client.get("/openapi.json")).json()["components"]["schemas"]
            for name in ("Prediction", "VerifyPrediction"):
                field = schema[name]["properties"]["unknown_token_share"]
                assert "unknown_token_share" in schema[name]["required"]
                assert "vocabulary" in field["description"] and field["maximum"] == 1
            # the Open Inference Protocol's outputs stay the protocol's
            meta = (await client.get("/v2/models/topic")).json()
            assert "unknown_token_share" not in {o["name"] for o in meta["outputs"]}

    asyncio.run(scenario())


def test_unknown_fields_are_ignored_and_named_in_a_header(service_bundles):
    """Clients add metadata ("lang", "request_id"): an unknown field is ignored and named in
    X-Attserve-Ignored-Fields (docs/errors.md); a near miss of a real field stays a 422
    (test_error_messages)."""
    async def scenario():
        async with running_app(settings(service_bundles)) as (app, client):
            plain = await client.post("/classify", json={"text": "the team won"})
            assert plain.status_code == 200 and "x-attserve-ignored-fields" not in plain.headers
            extra = await client.post("/classify", json={"text": "the team won", "lang": "en", "request_id": 7})
            assert extra.status_code == 200, extra.text
            assert extra.headers["x-attserve-ignored-fields"] == "lang, request_id"
            assert extra.json() == plain.json()

            batch = await client.post("/classify", json={"inputs": [{"text": "a man", "source": "x"}, {"text": "b"}],
                                                         "meta": {"a": 1}})
            assert batch.status_code == 200, batch.text
            assert batch.headers["x-attserve-ignored-fields"] == "meta, inputs[0].source"
            for path, body in (("/entailment", {"premise": "a man", "hypothesis": "a man", "lang": "en"}),
                               ("/verify", {"claim": "a dog", "evidence": ["a dog runs"], "lang": "en"})):
                r = await client.post(path, json=body)
                assert r.status_code == 200 and r.headers["x-attserve-ignored-fields"] == "lang", r.text
            # a header value takes no newline: names are escaped, cut, and at most 10 listed
            odd = {"text": "a man", "a\r\nb": 1, "\u00e9t\u00e9": 2, "x" * 100: 3, **{f"k{i}": i for i in range(10)}}
            header = (await client.post("/classify", json=odd)).headers["x-attserve-ignored-fields"]
            assert header.startswith("a\\r\\nb, \\xe9t\\xe9, " + "x" * 40 + ", k0") and header.endswith("and 3 more")
            # a misplaced or misspelled field is still refused
            for body in ({"inputs": [{"text": "a"}], "text": "b"}, {"text": "a", "modle": "topic"},
                         {"inputs": [{"text": "a", "explain": True}]}):
                assert_error(await client.post("/classify", json=body), 422, "invalid_input")

            schema = (await client.get("/openapi.json")).json()["components"]["schemas"]
            assert "additionalProperties" not in schema["ClassifyRequest"]

    asyncio.run(scenario())


def test_truncate_false_is_a_422_on_every_task_endpoint_and_true_cuts(service_bundles):
    """`"truncate"` means the same on every endpoint with texts (issue 56: /classify ignored it):
    true (the default) cuts a long text and says so, false refuses it naming the input."""
    long_text = " ".join(["word"] * 200)
    cases = {
        "/classify": ({"text": long_text}, {"text": "short"}),
        "/entailment": ({"premise": long_text, "hypothesis": "a man"}, {"premise": "a man", "hypothesis": "a man"}),
        "/verify": ({"claim": "a dog", "evidence": ["ok", long_text]}, {"claim": "a dog", "evidence": ["ok"]}),
    }

    async def scenario():
        async with running_app(Settings(model_repository=service_bundles)) as (app, client):
            out = {}
            for path, (long_input, short_input) in cases.items():
                out[path] = (await client.post(path, json={**long_input, "truncate": False}),
                             await client.post(path, json={**long_input, "truncate": True}),
                             await client.post(path, json={"inputs": [short_input, long_input, long_input],
                                                           "truncate": False}),
                             await client.post(path, json={**short_input, "truncate": False}),
                             await client.post(path, json={"inputs": [{**short_input, "truncate": False}]}))
            return out
    # (/rerank, TEI's contract, has always taken it: tests/service/test_rerank.py)
    for path, (refused, cut, batch, short, misplaced) in asyncio.run(scenario()).items():
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_input", path
        assert "longer than the model's max length" in refused.json()["error"]["message"]
        assert cut.status_code == 200 and cut.json()["truncated"] is True, path
        message = batch.json()["error"]["message"]
        assert batch.status_code == 422 and message.startswith("inputs[1] and 1 more inputs: "), (path, message)
        assert short.status_code == 200 and short.json()["truncated"] is False, path
        assert misplaced.status_code == 422 and "goes at the top level" in misplaced.json()["error"]["message"]


def test_flags_take_json_booleans_only(service_bundles):
    """explain / truncate are JSON true or false, as the schema says: 0, 1.0 or "true" would be
    read as booleans by pydantic's lax mode, and the fuzz test's negative-data check refuses that."""
    async def scenario():
        async with running_app(Settings(model_repository=service_bundles)) as (app, client):
            return [await client.post("/classify", json={"text": "a fine day", flag: value})
                    for flag in ("explain", "truncate") for value in (0, 1.0, "true", True)]
    answers = asyncio.run(scenario())
    assert [r.status_code for r in answers] == [422, 422, 422, 200] * 2
    assert "boolean" in answers[0].json()["error"]["message"]
