"""Product-of-experts training against a statement-only bias (`[train] debias = "statement-only"`):
the loss, the cross-fitted bias model, and the trainer feeding one into the other."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.layers import cross_entropy
from tests.unit.test_trainer import KEYWORDS, NOISE, make_recipe, make_splits
from training.debias import statement_only_prior
from training.examples import ClaimExample, PairExample
from training.trainer import METRICS_FILE, TrainOptions, train

pytestmark = pytest.mark.timeout(300)


def test_the_loss_is_cross_entropy_of_logits_plus_bias_and_spares_what_the_bias_knows():
    logits = torch.tensor([[0.2, 0.1, -0.3], [0.0, 0.5, 0.1]], requires_grad=True)
    labels = torch.tensor([0, 2])
    bias = torch.log(torch.tensor([[0.9, 0.05, 0.05], [1 / 3, 1 / 3, 1 / 3]]))
    loss = cross_entropy(logits, labels, 0.0, bias)
    assert torch.allclose(loss, F.cross_entropy(logits + bias, labels))
    assert torch.allclose(cross_entropy(logits, labels), F.cross_entropy(logits, labels))
    # a uniform bias changes nothing; a bias that is confidently right leaves little to learn
    (grad,) = torch.autograd.grad(loss, logits)
    (plain,) = torch.autograd.grad(F.cross_entropy(logits, labels), logits)
    assert torch.allclose(grad[1], plain[1], atol=1e-6)
    assert grad[0].abs().sum() < 0.3 * plain[0].abs().sum()


def test_the_bias_model_finds_a_cue_in_the_statement_and_none_where_there_is_none():
    cued = make_splits("entailment", sizes=(300, 10, 10)).train  # the hypothesis keyword gives the label
    labels = list(KEYWORDS["entailment"])
    prior = statement_only_prior(cued, labels)
    assert prior.log_probs.shape == (300, 3) and prior.log_probs.dtype == np.float32
    assert np.allclose(np.exp(prior.log_probs).sum(-1), 1.0, atol=1e-5)
    assert prior.accuracy >= 0.9 and abs(prior.majority - 1 / 3) < 0.01

    # the same pairs with the keyword moved into the premise: the hypothesis alone tells nothing
    moved = [PairExample(e.hypothesis, e.premise, e.label) for e in cued]
    assert statement_only_prior(moved, labels).accuracy < 0.5

    # claims: the statement is the claim, never the evidence
    claims = make_splits("verification", sizes=(300, 10, 10)).train
    assert statement_only_prior(claims, list(KEYWORDS["verification"])).accuracy >= 0.9
    swapped = [ClaimExample(e.evidence[0], (e.claim,), e.label) for e in claims]
    assert statement_only_prior(swapped, list(KEYWORDS["verification"])).accuracy < 0.5


def test_each_example_is_scored_by_a_model_that_never_saw_it(monkeypatch):
    """Cross-fitting: every statement is scored exactly once, by a model fitted on other statements."""
    import training.debias

    folds = []  # (statements fitted, statements scored), one per fold
    real_vectorizer = training.debias._vectorizer

    class Spy:
        def __init__(self) -> None:
            self.inner = real_vectorizer()
            folds.append([None, None])

        def fit_transform(self, texts):
            folds[-1][0] = list(texts)
            return self.inner.fit_transform(texts)

        def transform(self, texts):
            folds[-1][1] = list(texts)
            return self.inner.transform(texts)

    monkeypatch.setattr(training.debias, "_vectorizer", Spy)
    rng = random.Random(0)
    labels = list(KEYWORDS["entailment"])
    examples = [PairExample("a man", f"{rng.choice(NOISE)} {rng.choice(NOISE)} n{i}", labels[i % 3]) for i in range(100)]
    prior = statement_only_prior(examples, labels, folds=4)
    assert len(folds) == 4
    scored = [text for _, predicted in folds for text in predicted]
    assert sorted(scored) == sorted(e.hypothesis for e in examples)  # each exactly once
    for fitted, predicted in folds:
        assert not set(fitted) & set(predicted) and len(fitted) + len(predicted) == 100
    assert prior.log_probs.shape == (100, 3)


def test_training_with_the_bias_changes_the_updates_and_records_the_cue(tmp_path):
    splits = make_splits("entailment")
    plain = train(make_recipe("entailment", epochs=2), tmp_path / "plain", TrainOptions(progress=False, threads=1, splits=splits))
    debiased = train(make_recipe("entailment", epochs=2, debias="statement-only"), tmp_path / "poe", TrainOptions(progress=False,
                     threads=1, splits=splits))
    before, after = plain.network.state_dict(), debiased.network.state_dict()
    assert not all(torch.equal(before[k], after[k]) for k in before)  # same seed, same data: only the loss differs
    meta = json.loads((tmp_path / "poe" / "config.json").read_text())
    bias = meta["metrics"]["statement_only_bias"]
    assert bias["accuracy"] >= 0.8 and abs(bias["majority"] - 1 / 3) < 0.02
    assert "statement_only_bias" not in json.loads((tmp_path / "plain" / "config.json").read_text())["metrics"]
    assert json.loads((tmp_path / "poe" / METRICS_FILE).read_text())["test"] == debiased.test

    with pytest.raises(ValueError, match="needs a pair task"):
        train(make_recipe("classification", debias="statement-only"), tmp_path / "cls", TrainOptions(progress=False, threads=1,
              splits=make_splits("classification")))
