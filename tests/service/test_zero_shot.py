"""POST /zero-shot (service.http.zero_shot): a text and candidate labels, scored as entailment pairs
(premise = the text, hypothesis = the template with the label) by a served entailment model. The
answer must be what /entailment gives for the same pairs, put through the documented formula;
the errors and metrics are the other endpoints'."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.settings import Settings
from service.http.zero_shot import MAX_CANDIDATE_LABELS
from tests.bundles import ARCHITECTURE, CORPUS, SMALL, copy_repository, metric_samples, running_app

TEXT = "the team won the championship after extra time ."
LABELS = ["sports", "business", "music", "politics"]


@pytest.fixture(scope="module")
def repository(service_bundles, tmp_path_factory) -> Path:
    """The test bundles' 3-label "nli" and "sentiment", plus two 2-label entailment bundles:
    "entails" (entails / neutral, as scitail-attconv) and "yesno" (no entailment label at all)."""
    import torch

    from export.bundle import write_bundle_from_network
    from models import build_network
    from training.tokenizer import build_tokenizer, save_tokenizer

    root = copy_repository(service_bundles, tmp_path_factory.mktemp("zero-shot") / "repository", ["nli", "sentiment"])
    tokenizer_path = save_tokenizer(build_tokenizer(CORPUS), root.parent / "tokenizer.json")
    vocab_size = build_tokenizer(CORPUS).get_vocab_size(with_added_tokens=True)
    for name, labels, seed in (("entails", ["entails", "neutral"], 7), ("yesno", ["yes", "no"], 8)):
        torch.manual_seed(seed)
        network = build_network(ARCHITECTURE, task="entailment", vocab_size=vocab_size, num_labels=2, dropout=0.0,
                                **SMALL)
        write_bundle_from_network(network, ARCHITECTURE, name, labels, tokenizer_path, root / name,
                                  max_lengths={"premise_ids": 24, "hypothesis_ids": 16},
                                  metrics={"test": {"note": "untrained test bundle"}}, version=f"test-{seed}")
    return root


def post_all(repository: Path, requests: list[tuple[str, dict]], **settings) -> tuple[list, str]:
    """The answers of `requests` (path, body) in order, and /metrics after them."""
    async def scenario():
        async with running_app(Settings(model_repository=repository, default_entailment_model="nli",
                                        **settings)) as (_, client):
            answers = [await client.post(path, json=body) for path, body in requests]
            return answers, (await client.get("/metrics")).text
    return asyncio.run(scenario())


def pairs(labels: list[str], template: str = "This example is {}.") -> list[dict]:
    return [{"premise": TEXT, "hypothesis": template.replace("{}", label)} for label in labels]


@pytest.mark.parametrize("model", ["nli", "entails"])
def test_the_answer_is_the_entailment_answers_through_the_formula(repository, model):
    """Single-label: P(entail) normalized over the labels; multi-label: entail vs contradiction
    (the 2-label model: its P(entails)); labels best first. Computed here from /entailment's own
    answer to the same pairs, so a wrong premise, hypothesis, label index or order fails."""
    template = "The topic is {}."
    requests = [("/entailment", {"inputs": pairs(LABELS, template), "model": model}),
                ("/zero-shot", {"text": TEXT, "candidate_labels": LABELS, "hypothesis_template": template,
                                "model": model}),
                ("/zero-shot", {"text": TEXT, "candidate_labels": LABELS, "hypothesis_template": template,
                                "model": model, "multi_label": True})]
    (entailment, single, multi), _ = post_all(repository, requests)
    assert entailment.status_code == single.status_code == multi.status_code == 200, single.text
    results = entailment.json()["results"]
    entail = "entailment" if model == "nli" else "entails"
    p = {label: r["scores"][entail] for label, r in zip(LABELS, results)}
    expected_single = {label: p[label] / sum(p.values()) for label in LABELS}
    if model == "nli":
        expected_multi = {label: p[label] / (p[label] + r["scores"]["contradiction"]) for label, r in zip(LABELS, results)}
    else:
        expected_multi = p
    for answer, expected in ((single.json(), expected_single), (multi.json(), expected_multi)):
        assert answer["labels"] == sorted(LABELS, key=lambda label: (-expected[label], LABELS.index(label)))
        assert answer["scores"] == [expected[label] for label in answer["labels"]]  # exactly: same floats
        assert answer["model"] == model and answer["sequence"] == TEXT
        assert answer["unknown_token_share"] == max(r["unknown_token_share"] for r in results)
    assert sum(single.json()["scores"]) == pytest.approx(1.0)
    assert multi.json()["multi_label"] is True and single.json()["multi_label"] is False


def test_default_model_is_the_entailment_default(repository):
    (answer,), _ = post_all(repository, [("/zero-shot", {"text": TEXT, "candidate_labels": ["a", "b"]})])
    assert answer.status_code == 200 and answer.json()["model"] == "nli"


@pytest.mark.parametrize("body, code, words", [
    ({"text": TEXT, "candidate_labels": []}, "invalid_input", "candidate_labels"),
    ({"text": TEXT, "candidate_labels": [f"l{i}" for i in range(MAX_CANDIDATE_LABELS + 1)]}, "invalid_input",
     "candidate_labels"),
    ({"text": TEXT, "candidate_labels": ["a", "b", "a"]}, "invalid_input", "candidate_labels[2] repeats candidate_labels[0]"),
    ({"text": TEXT, "candidate_labels": ["a"], "hypothesis_template": "It is about"}, "invalid_input", "exactly once"),
    ({"text": "  ", "candidate_labels": ["a"]}, "invalid_input", "text"),
    ({"text": TEXT, "candidate_labels": ["a"], "model": "sentiment"}, "wrong_task", "classification"),
    ({"text": TEXT, "candidate_labels": ["a"], "model": "yesno"}, "wrong_task", "no entailment label"),
    ({"text": TEXT, "candidate_labels": ["a"], "model": "nope"}, "unknown_model", "nope"),
    ({"text": TEXT, "candidate_labels": ["a"], "candidate_label": ["b"]}, "invalid_input", "did you mean 'candidate_labels'"),
    ({"text": "x" * 300, "candidate_labels": ["a", "b"]}, "invalid_input", "text: 300 characters"),
    ({"text": TEXT, "candidate_labels": ["a", "b " * 150]}, "invalid_input", "candidate_labels[1] (its hypothesis)"),
    ({"text": TEXT + " and more" * 20, "candidate_labels": ["a"], "truncate": False}, "invalid_input",
     "longer than the model's max length"),
])
def test_errors_are_structured_422s_in_the_requests_terms(repository, body, code, words):
    (answer,), _ = post_all(repository, [("/zero-shot", body)], max_text_chars=256)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and words in error["message"], error


def test_the_pairs_count_against_max_inputs_per_request(repository):
    (answer,), _ = post_all(repository, [("/zero-shot", {"text": TEXT, "candidate_labels": ["a", "b", "c"]})],
                            max_inputs_per_request=2)
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "too_many_inputs"


def test_metrics_count_it_under_its_own_endpoint_label(repository):
    requests = [("/zero-shot", {"text": TEXT, "candidate_labels": LABELS}),
                ("/zero-shot", {"text": TEXT, "candidate_labels": []})]
    answers, metrics = post_all(repository, requests)
    assert [a.status_code for a in answers] == [200, 422]
    requests_total = metric_samples(metrics, "attserve_requests_total")
    assert requests_total[(("endpoint", "zero_shot"), ("model", "nli"), ("status", "200"))] == 1
    assert requests_total[(("endpoint", "zero_shot"), ("model", ""), ("status", "422"))] == 1
    inputs = metric_samples(metrics, "attserve_inputs_total")
    assert inputs[(("endpoint", "zero_shot"), ("model", "nli"))] == len(LABELS)


def test_openapi_and_index_list_it(repository):
    async def scenario():
        async with running_app(Settings(model_repository=repository)) as (_, client):
            return (await client.get("/openapi.json")).json(), (await client.get("/")).json()
    spec, index = asyncio.run(scenario())
    assert "/zero-shot" in spec["paths"] and "ZeroShotRequest" in spec["components"]["schemas"]
    assert "POST /zero-shot" in index["endpoints"]


# --- the batch form: {"inputs": [...]}, answered {"results": [...]} in input order ------------------

SECOND = "the bank reported a loss for the quarter ."


def test_the_batch_form_answers_each_input_as_its_single_request(repository):
    """Each result is byte for byte the single request's answer, in input order, with each
    input's own labels, template and multi_label (the pairs of all inputs run as one call)."""
    one = {"text": TEXT, "candidate_labels": LABELS, "hypothesis_template": "The topic is {}."}
    two = {"text": SECOND, "candidate_labels": ["money", "sports"], "multi_label": True}
    (batch, first, second), _ = post_all(repository, [("/zero-shot", {"inputs": [one, two], "model": "nli"}),
                                                      ("/zero-shot", {**one, "model": "nli"}),
                                                      ("/zero-shot", {**two, "model": "nli"})])
    assert batch.status_code == 200, batch.text
    assert batch.json() == {"results": [first.json(), second.json()]}
    assert [r["sequence"] for r in batch.json()["results"]] == [TEXT, SECOND]


@pytest.mark.parametrize("body, code, words", [
    ({"inputs": [{"text": TEXT, "candidate_labels": ["a"]}, {"text": TEXT, "candidate_labels": ["a", "a"]}]},
     "invalid_input", "inputs[1].candidate_labels: candidate_labels[1] repeats candidate_labels[0]"),
    ({"inputs": [{"text": TEXT, "candidate_labels": ["a"]}, {"text": TEXT}]}, "invalid_input",
     "inputs[1].candidate_labels: required field missing"),
    ({"inputs": [{"text": TEXT, "candidate_labels": ["a"]}], "text": TEXT}, "invalid_input", "not both"),
    ({"inputs": []}, "invalid_input", "inputs: empty list"),
    ({"inputs": [{"text": TEXT, "candidate_labels": ["a"]}, {"text": TEXT, "candidate_labels": ["a", "b " * 150]}]},
     "invalid_input", "inputs[1].candidate_labels[1] (its hypothesis)"),
    ({"inputs": [{"text": TEXT, "candidate_labels": ["a"]}, {"text": TEXT + " and more" * 20, "candidate_labels": ["a"]}],
      "truncate": False}, "invalid_input", "inputs[1].candidate_labels[0]: the text or its hypothesis is longer"),
])
def test_batch_errors_name_the_input(repository, body, code, words):
    (answer,), _ = post_all(repository, [("/zero-shot", body)], max_text_chars=256)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and words in error["message"], error


def test_the_pairs_of_every_input_count_against_max_inputs_per_request(repository):
    """Two inputs of two labels are four pairs: over a limit of 3, though each input alone fits."""
    body = {"inputs": [{"text": TEXT, "candidate_labels": ["a", "b"]}, {"text": SECOND, "candidate_labels": ["c", "d"]}]}
    (over, alone), _ = post_all(repository, [("/zero-shot", body), ("/zero-shot", body["inputs"][0])],
                                max_inputs_per_request=3)
    assert alone.status_code == 200, alone.text
    assert over.status_code == 422 and over.json()["error"]["code"] == "too_many_inputs"
    assert over.json()["error"]["message"].startswith("4 text-label pairs"), over.json()
