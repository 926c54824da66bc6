"""The Open Inference Protocol (KServe v2) endpoints, called by the real Triton client
(`tritonclient[http]`) against `python -m service` serving the shipped bundles: the answers
equal the task API's for each task, single and batched, in JSON and in binary tensors; the
metadata, readiness and error forms are the protocol's."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import numpy as np
import pytest

from core.tasks import TASKS  # noqa: E402

tritonclient_http = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

ENTAILMENT = [("A man is playing a guitar on stage.", "A man is performing music."),
              ("Two dogs run through a field.", "The animals are asleep."),
              ("A woman reads a book in a quiet library at night.", "Someone is reading.")]
CLAIMS = [("A dog is running in the snow.", ["Two people sit at a cafe table.", "A brown dog runs through deep snow.", "A child paints a fence."]),
          ("The woman is outdoors.", ["A woman walks her dog in the park."])]
TEXTS = ["Shares in the bank fell sharply after it reported a loss for the quarter.",
         "The striker scored twice in the second half to win the cup final."]


@pytest.fixture(scope="module")
def server(shipped_models_server):
    """The session's server of the shipped bundles (tests.bundles), and a Triton client of it."""
    service = shipped_models_server
    return service.base, tritonclient_http.InferenceServerClient(url=f"127.0.0.1:{service.port}")


def _bytes_input(name: str, values, binary: bool):
    array = np.asarray(values, dtype=object)
    tensor = tritonclient_http.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def _task_answers(base: str, path: str, inputs: list[dict], model: str) -> list[dict]:
    r = httpx.post(f"{base}{path}", json={"inputs": inputs, "model": model}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def _check(result, model: str, expected: list[dict], labels: list[str]) -> None:
    got_labels = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("label").reshape(-1)]
    scores = result.as_numpy("scores")
    truncated = result.as_numpy("truncated")
    assert scores.dtype == np.float32 and scores.shape == (len(expected), len(labels))
    assert got_labels == [e["label"] for e in expected]
    for row, e in zip(scores, expected):
        # FP32 tensor vs the task API's JSON float: equal to float32 precision
        np.testing.assert_allclose(row, [e["scores"][label] for label in labels], rtol=0, atol=1e-6)
    assert truncated.tolist() == [e["truncated"] for e in expected]
    assert result.get_response()["model_name"] == model


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_triton_client_answers_equal_the_task_api_for_every_task(server, binary):
    base, client = server
    assert client.is_server_live() and client.is_server_ready()

    for model, n in (("nli-attconv-advanced", 1), ("snli-attconv-light", 3)):
        pairs = ENTAILMENT[:n]
        expected = _task_answers(base, "/entailment", [{"premise": p, "hypothesis": h} for p, h in pairs], model)
        labels = client.get_model_metadata(model)["parameters"]["labels"]
        result = client.infer(model, [_bytes_input("premise", [p for p, _ in pairs], binary),
                                      _bytes_input("hypothesis", [h for _, h in pairs], binary)])
        _check(result, model, expected, labels)

    for n in (1, 2):
        texts = TEXTS[:n]
        expected = _task_answers(base, "/classify", [{"text": t} for t in texts], "bbc-act")
        result = client.infer("bbc-act", [_bytes_input("text", texts, binary)])
        _check(result, "bbc-act", expected, client.get_model_metadata("bbc-act")["parameters"]["labels"])

    for n in (1, 2):
        claims = CLAIMS[:n]
        width = max(len(ev) for _, ev in claims)
        padded = [ev + [""] * (width - len(ev)) for _, ev in claims]
        expected = _task_answers(base, "/verify", [{"claim": c, "evidence": ev} for c, ev in claims],
                                 "fever-attconv")
        result = client.infer("fever-attconv",
                              [_bytes_input("claim", [c for c, _ in claims], binary), _bytes_input("evidence", padded, binary)])
        labels = client.get_model_metadata("fever-attconv")["parameters"]["labels"]
        _check(result, "fever-attconv", expected, labels)
        evidence_scores = result.as_numpy("evidence_scores")
        assert evidence_scores.shape == (n, width)
        for row, e in zip(evidence_scores, expected):
            k = len(e["evidence_scores"])
            np.testing.assert_allclose(row[:k], e["evidence_scores"], rtol=0, atol=1e-6)
            assert not row[k:].any(), "padding evidence got a score"

    # rerank: query [n], texts [n, k] -> scores [n, k], the log-odds /rerank gives with raw_scores
    queries = [(c, ev) for c, ev in CLAIMS]
    width = max(len(ev) for _, ev in queries)
    result = client.infer("wikiqa-attconv", [_bytes_input("query", [q for q, _ in queries], binary),
                                             _bytes_input("texts", [ev + [""] * (width - len(ev)) for _, ev in queries], binary)])
    scores = result.as_numpy("scores")
    assert scores.dtype == np.float32 and scores.shape == (len(queries), width)
    for row, (query, texts) in zip(scores, queries):
        r = httpx.post(f"{base}/rerank", json={"query": query, "texts": texts, "raw_scores": True}, timeout=30)
        assert r.status_code == 200, r.text
        by_index = {rank["index"]: rank["score"] for rank in r.json()}
        np.testing.assert_allclose(row[: len(texts)], [by_index[i] for i in range(len(texts))], rtol=0, atol=1e-5)
        assert not row[len(texts):].any(), "a padding text got a score"


def test_requested_outputs_only_and_request_id(server):
    base, client = server
    result = client.infer("bbc-act", [_bytes_input("text", TEXTS, False)], request_id="req-7",
                          outputs=[tritonclient_http.InferRequestedOutput("label", binary_data=False)])
    response = result.get_response()
    assert response["id"] == "req-7"
    assert [o["name"] for o in response["outputs"]] == ["label"]
    assert result.as_numpy("scores") is None


def test_metadata_and_readiness_follow_the_protocol(server):
    base, client = server
    meta = client.get_server_metadata()
    assert meta["name"] == "attserve" and "binary_tensor_data" in meta["extensions"]
    models = httpx.get(f"{base}/v1/models").json()["models"]
    for entry in models:
        meta = client.get_model_metadata(entry["name"])
        assert meta["versions"] == [entry["version"]]
        assert meta["parameters"]["labels"] == entry["labels"]
        fields = {"classification": ["text"], "entailment": ["premise", "hypothesis"], "verification": ["claim", "evidence"],
                  "rerank": ["query", "texts"], "paraphrase": ["sentence1", "sentence2"]}[entry["task"]]
        assert [t["name"] for t in meta["inputs"]] == fields == list(TASKS[entry["task"]].field_names)
        assert all(t["datatype"] == "BYTES" for t in meta["inputs"])
        scores = next(t for t in meta["outputs"] if t["name"] == "scores")
        # a reranker's scores: one per text of the row, [n, k]; else one per label
        width = -1 if not TASKS[entry["task"]].labelled else len(entry["labels"])
        assert scores == {"name": "scores", "datatype": "FP32", "shape": [-1, width]}
        assert client.is_model_ready(entry["name"])
        assert client.is_model_ready(entry["name"], model_version=entry["version"])
        assert not client.is_model_ready(entry["name"], model_version="0")
    assert not client.is_model_ready("no-such-model")


def test_errors_are_the_protocols_error_form(server):
    base, client = server
    url = f"{base}/v2/models/nli-attconv-advanced/infer"

    def error(response, status):
        assert response.status_code == status, response.text
        body = response.json()
        assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]
        return body["error"]

    good = {"name": "premise", "shape": [1], "datatype": "BYTES", "data": ["A man sleeps."]}
    assert "hypothesis" in error(httpx.post(url, json={"inputs": [good]}), 400)
    wrong_type = {"name": "hypothesis", "shape": [1], "datatype": "INT32", "data": [3]}
    assert "BYTES" in error(httpx.post(url, json={"inputs": [good, wrong_type]}), 400)
    short = {"name": "hypothesis", "shape": [2], "datatype": "BYTES", "data": ["A man is asleep."]}
    assert "shape" in error(httpx.post(url, json={"inputs": [good, short]}), 400)
    blank = {"name": "hypothesis", "shape": [1], "datatype": "BYTES", "data": ["   "]}
    assert "visible" in error(httpx.post(url, json={"inputs": [good, blank]}), 422)
    assert "JSON" in error(httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}), 400)
    assert "unknown model" in error(httpx.post(f"{base}/v2/models/nope/infer", json={"inputs": [good]}), 404)
    assert error(httpx.get(f"{base}/v2/models/nope"), 404)
    # a claim row of padding only, and padding before a sentence
    claim = {"name": "claim", "shape": [1], "datatype": "BYTES", "data": ["A dog runs."]}
    evidence = {"name": "evidence", "shape": [1, 2], "datatype": "BYTES", "data": ["", "A dog runs fast."]}
    assert "pad" in error(httpx.post(f"{base}/v2/models/fever-attconv/infer",
                                     json={"inputs": [claim, evidence]}), 400)
    with pytest.raises(InferenceServerException, match="hypothesis"):
        client.infer("nli-attconv-advanced", [_bytes_input("premise", ["A man sleeps."], True)])
    # the task API's error body is unchanged
    r = httpx.post(f"{base}/entailment", json={"premise": "x"})
    assert r.status_code == 422 and set(r.json()["error"]) == {"code", "message"}


def test_v2_requests_are_counted_under_their_own_endpoint_label(server):
    base, client = server
    def count() -> float:
        text = httpx.get(f"{base}/metrics").text
        total = 0.0
        for line in text.splitlines():
            if line.startswith("attserve_requests_total{") and 'endpoint="v2_infer"' in line and 'model="bbc-act"' in line \
                    and 'status="200"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total
    before = count()
    for _ in range(3):
        client.infer("bbc-act", [_bytes_input("text", TEXTS[:1], True)])
    assert math.isclose(count() - before, 3.0)


def test_the_readme_snippet_runs_and_prints_what_its_comment_says(server):
    """The README's tritonclient snippet, run as written (against this server's port): the label
    and the scores it prints are the ones its `# ...` comment shows, to the comment's decimals."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    snippet = re.search(r"```python\n(.*?tritonclient\.http as .*?)```", readme, re.S)
    assert snippet, "the README lost its tritonclient snippet"
    code = snippet.group(1)
    comment = re.search(r"print\(.*\)\s*#\s*\[b'(\w+)'\]\s*\[\[([\d.\s]+)\]\]", code)
    assert comment, "the snippet's print line lost its '# [b'label'] [[scores]]' comment"
    base, _ = server
    printed = []
    exec(code.replace("localhost:8000", base.removeprefix("http://")), {"print": lambda *args: printed.append(args)})
    (labels, scores), = printed
    assert [x.decode() for x in labels.reshape(-1)] == [comment.group(1)]
    want = [float(x) for x in comment.group(2).split()]
    np.testing.assert_allclose(scores.reshape(-1), want, rtol=0, atol=6e-5)
