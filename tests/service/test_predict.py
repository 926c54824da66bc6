"""`POST /predict`, Text Embeddings Inference's classification contract (service/http/predict.py):
its answers are the /classify and /entailment answers of the same texts, in TEI's shape; its
errors are TEI's; huggingface_hub's InferenceClient reads it as a TEI server."""

from __future__ import annotations

import asyncio
import math

import pytest

from service.settings import Settings
from tests.bundles import running_app

TEXTS = ["shares in the bank fell after the loss .", "the team won the final .", "a new phone was released ."]
PAIRS = [["a man is playing a guitar .", "a person makes music ."], ["the cat sleeps .", "two dogs run ."]]


def run(repository, scenario):
    async def main():
        async with running_app(Settings(model_repository=repository)) as (app, client):
            return await scenario(client)
    return asyncio.run(main())


def tei_ranking(answer: dict) -> list[dict]:
    """A /classify or /entailment answer as TEI's [{"label", "score"}] best first."""
    return sorted(({"label": k, "score": v} for k, v in answer["scores"].items()), key=lambda x: -x["score"])


def test_predict_answers_texts_pairs_and_batches_as_the_task_endpoints(service_bundles):
    async def scenario(client):
        out = {"classify": [(await client.post("/classify", json={"text": t})).json() for t in TEXTS],
               "entail": [(await client.post("/entailment", json={"premise": a, "hypothesis": b})).json()
                          for a, b in PAIRS]}
        out["single"] = (await client.post("/predict", json={"inputs": TEXTS[0]})).json()
        out["pair"] = (await client.post("/predict", json={"inputs": PAIRS[0]})).json()
        out["texts"] = (await client.post("/predict", json={"inputs": TEXTS})).json()
        out["pairs"] = (await client.post("/predict", json={"inputs": PAIRS})).json()
        out["raw"] = (await client.post("/predict", json={"inputs": TEXTS[0], "raw_scores": True})).json()
        named = await client.post("/predict", json={"inputs": TEXTS[1], "model": "topic"})
        out["named"], out["topic"] = named.json(), (await client.post("/classify", json={"text": TEXTS[1],
                                                                                          "model": "topic"})).json()
        return out

    out = run(service_bundles, scenario)
    expected = [tei_ranking(a) for a in out["classify"]]
    assert out["single"] == expected[0]
    assert out["texts"] == expected
    assert out["pair"] == tei_ranking(out["entail"][0])
    assert out["pairs"] == [tei_ranking(a) for a in out["entail"]]
    assert [x["label"] for x in out["named"]] == [x["label"] for x in tei_ranking(out["topic"])]
    assert len(out["named"]) == 4  # the topic model's four labels, not the default classifier's
    # raw scores: log-probabilities (temperature 1 in the test bundles), same order, softmax gives them back
    raw = out["raw"]
    assert [x["label"] for x in raw] == [x["label"] for x in expected[0]]
    assert all(x["score"] <= 0 for x in raw)
    total = sum(math.exp(x["score"]) for x in raw)
    assert [math.exp(x["score"]) / total for x in raw] == pytest.approx([x["score"] for x in expected[0]], abs=1e-9)


def test_predict_errors_are_tei_shaped_4xx(service_bundles):
    bodies = [{"inputs": []}, {"inputs": 3}, {"inputs": [["a", "b", "c"]]}, {"inputs": "x", "raw_scores": "yes"},
              {"inputs": "x", "truncation_direction": "Left"}, {"inputs": [["a", "b"], "c"]},
              {"inputs": ["a premise", "a hypothesis"], "model": "sentiment"},
              {"inputs": " ".join(["word"] * 200)}]

    async def scenario(client):
        return [await client.post("/predict", json=body) for body in bodies]

    for body, response in zip(bodies, run(service_bundles, scenario)):
        assert response.status_code == 422, (body, response.text)
        error = response.json()
        assert isinstance(error["error"], str) and error["error"], body
        assert error["error_type"] == "validation", body


def test_predict_names_what_is_wrong_with_inputs_in_the_callers_words(service_bundles):
    """A malformed `inputs` gets one message naming the input and what it is, not pydantic's
    three union members (`function-after[valid_text(), str]`, `list[list[...]]`)."""
    cases = {
        '{"inputs": 5}': ("got a number", "a pair [a, b]"),
        '{"inputs": {"text": "x"}}': ("got an object",),
        '{"inputs": null}': ("got null",),
        '{"inputs": ["fine", 7]}': ("inputs[1] is a number", "a text is a string"),
        '{"inputs": [["a", "b"], ["c", false]]}': ("inputs[1][1] is a boolean",),
        '{"inputs": ["a", ["b", "c"]]}': ("inputs[1] is a list", "not both"),
        '{"inputs": ["a", "   "]}': ("inputs[1]", "empty"),
        '{"inputs": "  "}': ("empty",),
    }

    async def scenario(client):
        return [await client.post("/predict", content=body, headers={"content-type": "application/json"})
                for body in cases]

    for (body, words), response in zip(cases.items(), run(service_bundles, scenario)):
        assert response.status_code == 422, (body, response.text)
        message = response.json()["error"]
        assert all(w in message for w in words), (body, message)
        assert "function-after" not in message and "list[" not in message and "str]" not in message, (body, message)


def test_predict_truncate_true_cuts_a_long_text(service_bundles):
    long = " ".join(["the team won the final ."] * 40)

    async def scenario(client):
        return ((await client.post("/predict", json={"inputs": long, "truncate": True})).json(),
                (await client.post("/classify", json={"text": long})).json())

    predicted, classified = run(service_bundles, scenario)
    assert classified["truncated"]
    assert predicted == tei_ranking(classified)


def test_inference_client_text_classification(service_bundles, tmp_path):
    """huggingface_hub's client, pointed at /predict of a real server, reads its answers and errors."""
    hub = pytest.importorskip("huggingface_hub")
    import httpx

    from bench.harness import ServiceProcess

    server = ServiceProcess(service_bundles, tmp_path / "service.log")
    try:
        server.start()
        client = hub.InferenceClient(base_url=f"{server.base}/predict")
        expected = tei_ranking(httpx.post(f"{server.base}/classify", json={"text": TEXTS[0]}).json())
        got = client.text_classification(TEXTS[0])
        assert [(x.label, x.score) for x in got] == [(x["label"], x["score"]) for x in expected]
        assert [x.label for x in client.text_classification(TEXTS[0], top_k=1)] == [expected[0]["label"]]
        with pytest.raises(hub.errors.HfHubHTTPError) as error:
            client.text_classification(" ".join(["word"] * 200))
        assert "max length" in str(error.value)
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.terminate(timeout_s=30)


def test_predict_while_draining_is_a_tei_unhealthy_503(service_bundles):
    """Admission is the dataplane's: a draining server refuses /predict as every inference
    endpoint, in TEI's shape (error_type "unhealthy", the service's code beside it)."""
    async def scenario(client):
        app = client._transport.app
        app.state.service.draining = True
        try:
            return await client.post("/predict", json={"inputs": TEXTS[0]})
        finally:
            app.state.service.draining = False

    response = run(service_bundles, scenario)
    assert response.status_code == 503 and response.headers["retry-after"] == "1", response.text
    assert response.json() == {"error": "the server is shutting down", "error_type": "unhealthy",
                               "code": "shutting_down"}
