"""Transformers bundles served by the app (in-process): tiny BERT and RoBERTa NLI classifiers
built locally (tests/hf_models.py), imported with `attserve bundle import-hf`, answering
/entailment, /zero-shot, /tokenize and /v1/models as the attserve kind does, their scores
transformers' own softmax within 1e-5."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from service.settings import Settings  # noqa: E402 (after the importorskip)
from tests.bundles import running_app  # noqa: E402 (after the importorskip)
from tests.hf_models import build_export, reference  # noqa: E402 (after the importorskip)

LABELS = ["entailment", "neutral", "contradiction"]
LONG = " ".join(["the children are playing football in the park near the kitchen"] * 6)
PAIRS = [{"premise": "a man is playing a guitar on the stage .", "hypothesis": "a person is making music ."},
         {"premise": "the cat sleeps .", "hypothesis": "two dogs run across the snowy field ."},
         {"premise": LONG, "hypothesis": "nobody is in the kitchen ."}]


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """A repository of bert-nli and roberta-nli (imported through the CLI command), and their exports."""
    from typer.testing import CliRunner

    from cli.main import app

    root = tmp_path_factory.mktemp("hf-serving")
    exports = {}
    for kind in ("bert", "roberta"):
        exports[f"{kind}-nli"] = export = build_export(kind, root / "exports")
        result = CliRunner().invoke(app, ["bundle", "import-hf", str(export), "--task", "entailment",
                                          "-o", str(root / "repository" / f"{kind}-nli")])
        assert result.exit_code == 0, result.output
        assert "parity: max |logits - transformers|" in result.output
        assert "'ENTAILMENT': 'entailment'" in result.output
    result = CliRunner().invoke(app, ["bundle", "import-hf", str(exports["bert-nli"]), "--task", "verification",
                                      "--max-texts", "4", "-o", str(root / "repository" / "bert-fever")])
    assert result.exit_code == 0, result.output
    assert "'NEUTRAL': 'NOT ENOUGH INFO'" in result.output
    rerank = build_export("bert", root / "cross-encoder", {0: "LABEL_0"})
    exports["bert-rerank"] = rerank
    result = CliRunner().invoke(app, ["bundle", "import-hf", str(rerank), "--task", "rerank", "--max-texts", "4",
                                      "-o", str(root / "repository" / "bert-rerank")])
    assert result.exit_code == 0, result.output
    return root / "repository", exports


def run(repository: Path, scenario):
    async def main():
        async with running_app(Settings(model_repository=repository)) as (app, client):
            return await scenario(client)
    return asyncio.run(main())


def expected_scores(export: Path, pairs: list[dict]) -> np.ndarray:
    model, tokenizer = reference(export)
    batch = tokenizer([p["premise"] for p in pairs], [p["hypothesis"] for p in pairs], padding=True, truncation=True,
                      max_length=40, return_tensors="pt")
    with torch.no_grad():
        return torch.softmax(model(**batch).logits.double(), dim=-1).numpy()


@pytest.mark.parametrize("name", ["bert-nli", "roberta-nli"])
def test_entailment_answers_are_transformers_softmax(repository, name):
    """Single pairs and one batch of mixed lengths (one cut): each answer's scores are the softmax
    of transformers' logits within 1e-5, the same in or out of a batch; `truncated` says which
    was cut; explain answers with the tokens the model read; /tokenize and /zero-shot answer."""
    root, exports = repository

    async def scenario(client):
        singles = [await client.post("/entailment", json={**p, "model": name}) for p in PAIRS]
        batch = await client.post("/entailment", json={"inputs": PAIRS, "model": name})
        explained = await client.post("/entailment", json={**PAIRS[0], "model": name, "explain": True})
        tokenized = await client.post("/tokenize", json={**PAIRS[2], "model": name})
        zero = await client.post("/zero-shot", json={"text": PAIRS[0]["premise"], "model": name,
                                                     "candidate_labels": ["music", "food"]})
        strict = await client.post("/entailment", json={**PAIRS[2], "model": name, "truncate": False})
        return singles, batch, explained, tokenized, zero, strict

    singles, batch, explained, tokenized, zero, strict = run(root, scenario)
    expected = expected_scores(exports[name], PAIRS)
    assert batch.status_code == 200, batch.text
    for k, (single, batched) in enumerate(zip(singles, batch.json()["results"], strict=True)):
        assert single.status_code == 200, single.text
        for answer in (single.json(), batched):
            assert [answer["scores"][label] for label in LABELS] == pytest.approx(list(expected[k]), abs=1e-5)
            assert answer["label"] == LABELS[int(expected[k].argmax())]
            assert answer["truncated"] is (k == 2)
    assert explained.status_code == 200, explained.text
    tokens = explained.json()["explanation"]["tokens"]
    assert set(tokens) == {"premise", "hypothesis"} and len(tokens["hypothesis"]) >= 5
    assert "alignment" not in explained.json()["explanation"]  # a transformers bundle exposes no attention
    assert tokenized.status_code == 200, tokenized.text
    fields = tokenized.json()["fields"]
    assert fields["premise"]["truncated"] and fields["premise"]["count"] > len(fields["premise"]["tokens"])
    assert zero.status_code == 200, zero.text
    assert math.isclose(sum(zero.json()["scores"]), 1.0, abs_tol=1e-6)
    assert strict.status_code == 422 and "max length" in strict.json()["error"]["message"]


def test_models_lists_the_kind(repository):
    root, _ = repository

    async def scenario(client):
        return await client.get("/v1/models")

    listed = {m["name"]: m for m in run(root, scenario).json()["models"]}
    assert {n: (m["kind"], m["task"], m["status"]) for n, m in listed.items()} == {
        "bert-nli": ("transformers", "entailment", "ready"), "roberta-nli": ("transformers", "entailment", "ready"),
        "bert-rerank": ("transformers", "rerank", "ready"), "bert-fever": ("transformers", "verification", "ready")}
    assert listed["bert-rerank"]["max_evidence"] == 4
    assert listed["roberta-nli"]["labels"] == LABELS
    assert listed["bert-nli"]["length_buckets"] == {"input_ids": [8, 16, 24, 32, 40]}


def test_rerank_with_a_cross_encoder(repository):
    """/rerank on a one-logit cross-encoder: each text's score is the sigmoid of transformers'
    logit of its (query, text) pair (raw_scores: the logit), best first; over max_texts a 422."""
    root, exports = repository
    query = "what is the man playing ?"
    texts = [p["hypothesis"] for p in PAIRS] + [LONG]

    async def scenario(client):
        ranked = await client.post("/rerank", json={"query": query, "texts": texts, "model": "bert-rerank"})
        raw = await client.post("/rerank", json={"query": query, "texts": texts, "raw_scores": True})
        many = await client.post("/rerank", json={"query": query, "texts": texts * 2})
        return ranked, raw, many

    ranked, raw, many = run(root, scenario)
    model, tokenizer = reference(exports["bert-rerank"])
    batch = tokenizer([query] * len(texts), texts, padding=True, truncation=True, max_length=40, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits[:, 0].double()
    assert ranked.status_code == 200, ranked.text
    order = sorted(range(len(texts)), key=lambda i: -float(logits[i]))
    assert [r["index"] for r in ranked.json()] == order
    for answer, expected in ((ranked, torch.sigmoid(logits)), (raw, logits)):
        assert {r["index"]: r["score"] for r in answer.json()} == pytest.approx(dict(enumerate(expected.tolist())),
                                                                               abs=1e-5)
    assert many.status_code == 422 and "at most 4" in many.json()["error"]["message"]


def test_verify_with_a_pair_model(repository):
    """/verify on an NLI model: the label and scores of the evidence sentence that most decides
    the claim (least neutral), evidence_scores each sentence's share of 1 - P(neutral); explain
    answers with the claim's and each sentence's tokens."""
    root, exports = repository
    claim, evidence = "a person is making music .", [PAIRS[1]["premise"], PAIRS[0]["premise"], LONG]

    async def scenario(client):
        verified = await client.post("/verify", json={"claim": claim, "evidence": evidence})
        explained = await client.post("/verify", json={"claim": claim, "evidence": evidence[:1], "explain": True})
        return verified, explained

    verified, explained = run(root, scenario)
    model, tokenizer = reference(exports["bert-nli"])
    batch = tokenizer(evidence, [claim] * 3, padding=True, truncation=True, max_length=40, return_tensors="pt")
    with torch.no_grad():
        probs = torch.softmax(model(**batch).logits.double(), dim=-1)
    deciding = 1 - probs[:, 1]
    best = probs[int(deciding.argmax())]
    assert verified.status_code == 200, verified.text
    body = verified.json()
    fever = ["SUPPORTS", "NOT ENOUGH INFO", "REFUTES"]
    assert [body["scores"][label] for label in fever] == pytest.approx(best.tolist(), abs=1e-5)
    assert body["label"] == fever[int(best.argmax())] and body["truncated"] is True
    assert body["evidence_scores"] == pytest.approx((deciding / deciding.sum()).tolist(), abs=1e-3)
    assert explained.status_code == 200, explained.text
    tokens = explained.json()["explanation"]["tokens"]
    assert set(tokens) == {"claim", "evidence"} and len(tokens["evidence"]) == 1


def test_an_int8_bundle_answers_each_input_as_it_would_alone(repository, tmp_path):
    """Dynamic int8 quantization scales activations over a whole graph call, so two inputs in one
    call would move each other's scores (5e-3 on the tiny BERT): an int8 import runs one input per
    call, and a batch's answers equal the same inputs sent one by one, exactly."""
    from typer.testing import CliRunner

    from cli.main import app

    _, exports = repository
    out = tmp_path / "repository" / "bert-nli-int8"
    typed = CliRunner().invoke(app, ["bundle", "import-hf", str(exports["bert-nli"]), "--task", "entailment",
                                     "-o", str(out), "--int8"])
    assert typed.exit_code == 0, typed.output

    async def scenario(client):
        singles = [(await client.post("/entailment", json=p)).json() for p in PAIRS]
        batch = await client.post("/entailment", json={"inputs": PAIRS})
        return singles, batch

    singles, batch = run(out.parent, scenario)
    assert batch.status_code == 200, batch.text
    assert [a["scores"] for a in batch.json()["results"]] == [a["scores"] for a in singles]
