"""The paper benchmarks' metrics (MAP/MRR, accuracy/F1) against hand-worked values, the hand-made
features, and the dev-fitted feature stage."""

from __future__ import annotations

import numpy as np
import pytest

from training.examples import PairExample
from training.pair_evaluation import (
    FeatureExtractor,
    FeatureStage,
    average_precision,
    binary_metrics,
    entailment_features,
    inverse_document_frequencies,
    nonover_examples,
    paraphrase_features,
    ranking_metrics,
    reciprocal_rank,
    rouge_scores,
    selection_metric,
    task_metrics,
    word_count_features,
)


def test_average_precision_and_reciprocal_rank_by_hand():
    # ranking by score: c(0.9, rel), a(0.8, -), d(0.5, rel), b(0.1, -)
    relevant, scores = [False, False, True, True], [0.8, 0.1, 0.9, 0.5]
    assert average_precision(relevant, scores) == pytest.approx((1 / 1 + 2 / 3) / 2)
    assert reciprocal_rank(relevant, scores) == 1.0
    assert reciprocal_rank([True, False, False], [0.1, 0.5, 0.3]) == pytest.approx(1 / 3)
    # ties keep the given order (deterministic, not optimistic)
    assert reciprocal_rank([False, True], [0.5, 0.5]) == 0.5
    with pytest.raises(ValueError):
        average_precision([False, False], [1, 2])


def test_ranking_metrics_average_over_questions_and_skip_unanswerable_ones():
    groups = ["q1", "q1", "q1", "q2", "q2", "q3", "q3"]
    relevant = [0, 1, 0, 1, 0, 0, 0]
    scores = [0.9, 0.5, 0.1, 0.2, 0.7, 0.3, 0.4]
    metrics = ranking_metrics(groups, relevant, scores)
    assert metrics["map"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert metrics["mrr"] == pytest.approx(0.5)
    assert (metrics["questions"], metrics["questions_skipped"]) == (2, 1)


def test_binary_metrics_f1_is_of_the_positive_class():
    m = binary_metrics([1, 1, 0, 0, 1], [1, 0, 0, 1, 1])
    assert m["accuracy"] == pytest.approx(3 / 5)
    assert m["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert binary_metrics([0, 0], [0, 0])["f1"] == 0.0


def pair(q: str, a: str, label: str) -> PairExample:
    return PairExample(q, a, label)


def test_task_metrics_rank_wikiqa_by_the_positive_column_within_each_question():
    examples = [pair("q1", "a", "0"), pair("q1", "b", "1"), pair("q2", "c", "1"), pair("q2", "d", "0")]
    # the "1" column puts b first for q1 but d first for q2
    logits = np.array([[0.0, 1.0], [0.0, 2.0], [0.0, -1.0], [0.0, 0.5]])
    m = task_metrics("wikiqa", examples, ["0", "1"], logits)
    assert m["map"] == pytest.approx((1 + 0.5) / 2) and m["mrr"] == pytest.approx((1 + 0.5) / 2)
    # the label order decides which column is positive
    swapped = task_metrics("wikiqa", examples, ["1", "0"], logits[:, ::-1])
    assert swapped["map"] == pytest.approx(m["map"])
    # a saturated model still ranks (log-odds, not probabilities that round to 1.0)
    big = np.array([[0.0, 60.0], [0.0, 70.0], [0.0, 50.0], [0.0, 40.0]])
    assert task_metrics("wikiqa", examples, ["0", "1"], big)["map"] == 1.0
    assert selection_metric("wikiqa", examples, ["0", "1"])(logits) == pytest.approx(0.75)


def test_task_metrics_for_msrp_and_sick():
    msrp = [pair("a", "b", "1"), pair("c", "d", "0"), pair("e", "f", "1")]
    m = task_metrics("msrp", msrp, ["0", "1"], np.array([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]]))
    assert m["accuracy"] == pytest.approx(1 / 3) and m["f1"] == pytest.approx(2 / 4)
    sick = [pair("a", "b", "NEUTRAL"), pair("c", "d", "ENTAILMENT")]
    labels = ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]
    assert task_metrics("sick", sick, labels, np.array([[0, 1, 0], [0, 0, 1.0]]))["accuracy"] == 0.5
    with pytest.raises(ValueError, match="unknown benchmark task"):
        task_metrics("snli", sick, labels, np.zeros((2, 3)))


def test_wikiqa_word_counts_skip_stopwords_and_weight_by_idf():
    idf, unseen = inverse_document_frequencies(["the tower is tall", "the river is long", "the tower fell"])
    assert idf["tower"] < idf["river"] < unseen  # rarer words weigh more; unseen the most
    features = word_count_features([pair("How tall is the Eiffel tower?", "The tower is 300 m tall.", "1")], idf, unseen)
    # question words: how tall is the eiffel tower; non-stopwords in the answer: tall, tower
    assert features.tolist() == [[6, 6, 2, pytest.approx(idf["tall"] + idf["tower"])]]


def test_rouge_scores_by_hand():
    a, b = "a b c d".split(), "a b d".split()
    r1, r2, su4 = rouge_scores(a, b)
    assert r1 == pytest.approx(2 * (3 / 4) * (3 / 3) / (3 / 4 + 1))
    assert r2 == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))  # "a b" of {ab, bc, cd} / {ab, bd}
    assert rouge_scores(a, a) == (1.0, 1.0, 1.0)
    assert su4 > r2  # skip-bigrams (a,d), (b,d) also match
    assert paraphrase_features([pair("A b c d.", "a b d", "1")]).tolist() == [[4, 3, r1, r2, su4]]


def test_sick_features_negation_and_non_overlapping_lengths():
    rows = entailment_features([
        pair("A man is jumping into an empty pool", "A man is jumping into a full pool", "CONTRADICTION"),
        pair("There is no dog", "A dog runs", "CONTRADICTION"),
    ])
    # NONOVER of the first: "an empty" / "full" (case-insensitive, so "a" is shared; the
    # paper's Table 5 keeps "a full")
    assert rows[0].tolist() == [0, 8, 8, 2, 1]
    assert rows[1][0] == 1 and rows[1][1:].tolist() == [4, 3, 3, 2]


def test_feature_extractor_per_task_and_its_idf_comes_from_train():
    train = [pair("q", "alpha beta", "0"), pair("q", "alpha gamma", "1")]
    wikiqa = FeatureExtractor.fit("wikiqa", train)
    assert wikiqa.idf["alpha"] < wikiqa.idf["beta"]
    assert wikiqa([pair("beta alpha", "alpha beta", "1")]).shape == (1, 4)
    assert FeatureExtractor.fit("msrp", train)(train).shape == (2, 5)
    assert FeatureExtractor.fit("sick", train)(train).shape == (2, 5)
    with pytest.raises(ValueError):
        FeatureExtractor.fit("rte", train)


def test_the_feature_stage_learns_from_an_informative_feature():
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 2, size=400)
    logits = rng.normal(size=(400, 2))  # an uninformative network
    features = (gold + rng.normal(scale=0.3, size=400))[:, None]  # an informative feature
    stage = FeatureStage().fit(logits[:200], features[:200], gold[:200])
    scores = stage.scores(logits[200:], features[200:], 2)
    assert scores.shape == (200, 2) and np.allclose(np.exp(scores).sum(1), 1)
    assert (scores.argmax(1) == gold[200:]).mean() > 0.85
    assert (logits[200:].argmax(1) == gold[200:]).mean() < 0.65


def test_a_class_missing_from_the_fitting_data_gets_minus_infinity():
    logits = np.zeros((4, 3))
    stage = FeatureStage().fit(logits, np.array([[0.0], [1.0], [0.0], [1.0]]), [0, 2, 0, 2])
    scores = stage.scores(logits, np.array([[0.0], [1.0], [0.0], [1.0]]), 3)
    assert np.isneginf(scores[:, 1]).all() and scores.argmax(1).tolist() == [0, 2, 0, 2]


def test_nonover_removes_the_shared_words_and_marks_an_emptied_sentence():
    pairs = nonover_examples([
        pair("Children in red shirts are playing in the leaves", "Three kids are sitting in the leaves", "NEUTRAL"),
        pair("A dog runs.", "a DOG runs", "ENTAILMENT"),
    ])
    assert pairs[0] == pair("children red shirts playing", "three kids sitting", "NEUTRAL")  # the paper's Table 5
    assert pairs[1] == pair("<empty>", "<empty>", "ENTAILMENT")
