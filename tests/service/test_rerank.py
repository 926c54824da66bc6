"""The fourth task, rerank: a query and candidate texts -> one relevance score per text, served
as TEI's `/rerank` (request `query`, `texts`, `raw_scores`, `return_text`, `truncate`; answer a
list of `{index, score[, text]}`, best first) and over the Open Inference Protocol. The bundle is
a tiny two-label pair network wrapped by models.rerank.PairReranker and exported through the one
bundle writer, as `make models` does for the shipped WikiQA reranker."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from core.bundle import load_bundle
from core.tasks import TASKS
from core.tokenization import TextEncoder
from service.settings import Settings
from tests.bundles import ARCHITECTURE, CORPUS, SMALL, running_app

MAX_TEXTS = 4
QUERY = "what is the capital of france ?"
TEXTS = ["paris is the capital of france .", "two dogs run across the snowy field .",
         "the eiffel tower was completed in 1889 ."]


@pytest.fixture(scope="module")
def ranker(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    """A model repository holding one rerank bundle ("ranker"), and the pair network inside it."""
    from export.bundle import write_bundle_from_network
    from models import build_network, serve_as
    from training.tokenizer import build_tokenizer, save_tokenizer

    root = tmp_path_factory.mktemp("rerank") / "repository"
    root.mkdir(parents=True)
    tokenizer_path = save_tokenizer(build_tokenizer(CORPUS), root.parent / "tokenizer.json")
    torch.manual_seed(5)
    pair = build_network(ARCHITECTURE, task="entailment", vocab_size=TextEncoder.from_file(tokenizer_path).vocab_size,
                         num_labels=2, dropout=0.0, **SMALL).eval()
    write_bundle_from_network(serve_as(pair, "rerank"), ARCHITECTURE, "ranker", ["0", "1"], tokenizer_path,
                              root / "ranker", max_lengths={"query_ids": 16, "texts_ids": 12}, max_evidence=MAX_TEXTS,
                              metrics={"test": {"note": "untrained test bundle"}}, version="test-rerank")
    return root, pair


def pair_log_odds(pair: torch.nn.Module, encoder: TextEncoder, query: str, text: str) -> float:
    """The pair network's own log-odds of "1" for (query, text), in PyTorch, alone in its batch."""
    [q] = encoder.encode([query], 16).ids
    [t] = encoder.encode([text], 12).ids
    with torch.inference_mode():
        logits = pair.logits_from_ids(torch.tensor([q]), torch.tensor([t]))[0]
    return float(logits[1] - logits[0])


def post_all(repository: Path, requests: list[tuple[str, dict]]) -> list:
    async def scenario():
        async with running_app(Settings(model_repository=repository)) as (app, client):
            return [await client.post(path, json=body) for path, body in requests]
    return asyncio.run(scenario())


def test_the_task_is_one_registry_entry():
    task = TASKS["rerank"]
    assert task.endpoint == "/rerank" and task.inputs == ("query_ids", "texts_ids") and task.input_ranks == (2, 3)
    assert task.outputs == ("scores",) and not task.labelled


def test_the_bundle_has_no_labels_and_scores_per_text(ranker):
    config = load_bundle(ranker[0] / "ranker").config
    assert config.task == "rerank" and config.labels == [] and config.outputs == ["scores"]
    assert config.max_evidence == MAX_TEXTS and config.parity.max_abs_diff <= 1e-4


def test_tei_request_and_answer(ranker):
    """TEI's documented rerank call: the answer is a list of {index, score}, best first,
    scores the sigmoid of each pair's log-odds; raw_scores gives the log-odds; return_text adds
    each text; each text's score is its pair's alone, whatever else is in the list."""
    repository, pair = ranker
    encoder = TextEncoder.from_file(repository / "ranker" / "tokenizer.json")
    plain, raw, with_text, alone = post_all(repository, [
        ("/rerank", {"query": QUERY, "texts": TEXTS}),
        ("/rerank", {"query": QUERY, "texts": TEXTS, "raw_scores": True}),
        ("/rerank", {"query": QUERY, "texts": TEXTS, "return_text": True, "truncate": True,
                     "truncation_direction": "Right"}),
        ("/rerank", {"query": QUERY, "texts": [TEXTS[2]], "raw_scores": True}),
    ])
    for response in (plain, raw, with_text, alone):
        assert response.status_code == 200, response.text
    expected = [pair_log_odds(pair, encoder, QUERY, text) for text in TEXTS]
    order = sorted(range(len(TEXTS)), key=lambda i: -expected[i])
    assert [r["index"] for r in plain.json()] == order
    assert all(set(r) == {"index", "score"} for r in plain.json())
    assert [r["score"] for r in raw.json()] == pytest.approx([expected[i] for i in order], abs=1e-4)
    assert [r["score"] for r in plain.json()] == pytest.approx([1 / (1 + math.exp(-expected[i])) for i in order], abs=1e-5)
    assert [(r["index"], r["text"]) for r in with_text.json()] == [(i, TEXTS[i]) for i in order]
    assert alone.json()[0]["score"] == pytest.approx(next(r["score"] for r in raw.json() if r["index"] == 2), abs=1e-5)


def test_bad_rerank_requests_are_clear_4xx(ranker):
    repository, _ = ranker
    long_text = " ".join(["paris"] * 40)
    too_many, empty, cut, left, ignored = post_all(repository, [
        ("/rerank", {"query": QUERY, "texts": TEXTS * 2}),
        ("/rerank", {"query": QUERY, "texts": []}),
        ("/rerank", {"query": QUERY, "texts": [long_text], "truncate": False}),
        ("/rerank", {"query": QUERY, "texts": TEXTS, "truncation_direction": "Left"}),
        ("/rerank", {"query": QUERY, "texts": TEXTS, "top_n": 2}),
    ])
    for response, needle in ((too_many, "at most 4"), (empty, "texts"), (cut, "truncate"), (left, "truncation_direction")):
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert needle in error["message"], error
    assert ignored.status_code == 200 and ignored.headers["x-attserve-ignored-fields"] == "top_n"
    # the advice is the task's own (core.tasks TextField.too_many), not verification's wording
    advice = too_many.json()["error"]["message"]
    assert "split the texts over several requests" in advice and "claim" not in advice, advice


def test_rerank_over_the_open_inference_protocol(ranker):
    """The same task over /v2: query [n], texts [n, k] (ragged rows padded with ""), scores
    [n, k] FP32: the log-odds /rerank's raw_scores gives."""
    repository, _ = ranker
    body = {"inputs": [{"name": "query", "datatype": "BYTES", "shape": [2], "data": [QUERY, "who won ?"]},
                       {"name": "texts", "datatype": "BYTES", "shape": [2, 3], "data": [*TEXTS, TEXTS[1], "", ""]}]}
    v2, raw, second = post_all(repository, [
        ("/v2/models/ranker/infer", body),
        ("/rerank", {"query": QUERY, "texts": TEXTS, "raw_scores": True}),
        ("/rerank", {"query": "who won ?", "texts": [TEXTS[1]], "raw_scores": True}),
    ])
    assert v2.status_code == 200, v2.text
    outputs = {o["name"]: o for o in v2.json()["outputs"]}
    assert set(outputs) == {"truncated", "scores"} and outputs["scores"]["shape"] == [2, 3]
    scores = np.asarray(outputs["scores"]["data"]).reshape(2, 3)
    by_index = {r["index"]: r["score"] for r in raw.json()}
    assert scores[0].tolist() == pytest.approx([by_index[i] for i in range(3)], abs=1e-5)
    assert scores[1, 0] == pytest.approx(second.json()[0]["score"], abs=1e-5) and scores[1, 1:].tolist() == [0.0, 0.0]


def test_openapi_and_the_model_list_describe_rerank(ranker):
    async def scenario():
        async with running_app(Settings(model_repository=ranker[0])) as (app, client):
            return (await client.get("/openapi.json")).json(), (await client.get("/v1/models")).json()
    schema, listed = asyncio.run(scenario())
    operation = schema["paths"]["/rerank"]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/RerankRequest")
    assert set(schema["components"]["schemas"]["RerankRequest"]["properties"]) >= {
        "query", "texts", "raw_scores", "return_text", "truncate", "model"}
    assert listed["tasks"]["rerank"] == {"endpoint": "/rerank", "models": ["ranker"], "default": "ranker",
                                         "default_reason": "the only rerank model served"}


def test_the_card_of_a_reranker_is_map_and_mrr_through_its_graph(ranker):
    """`attserve card` on a rerank bundle: each question's candidates go through the graph as one
    list, and MAP/MRR match the pair network's own scores ranked per question."""
    from training.card import build_card
    from training.examples import DatasetSplits, PairExample
    from training.pair_evaluation import ranking_metrics

    repository, pair = ranker
    encoder = TextEncoder.from_file(repository / "ranker" / "tokenizer.json")
    questions = {QUERY: [(t, "1" if i == 0 else "0") for i, t in enumerate(TEXTS)],
                 "who won the championship ?": [(CORPUS[6], "1"), *((t, "0") for t in CORPUS[:5])],  # 6 > MAX_TEXTS
                 "when was the tower completed ?": [(CORPUS[15], "1"), (CORPUS[14], "0")]}
    pairs = [PairExample(q, t, label) for q, candidates in questions.items() for t, label in candidates]
    splits = DatasetSplits(name="wikiqa", task="entailment", labels=["0", "1"], train=pairs, dev=pairs, test=pairs)
    card = build_card(repository / "ranker", splits=splits, progress=False)
    scores = [pair_log_odds(pair, encoder, e.premise, e.hypothesis) for e in pairs]
    want = ranking_metrics([e.premise for e in pairs], [e.label == "1" for e in pairs], scores)
    test = card["in_domain"]["test"]
    assert test["questions"] == 3 and test["pairs"] == len(pairs)
    assert test["map"] == pytest.approx(want["map"], abs=1e-9) and test["mrr"] == pytest.approx(want["mrr"], abs=1e-9)
    assert card["calibration"]["temperature"] == 1.0 and card["ood_dev"] == {}
