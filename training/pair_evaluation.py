"""Metrics and the feature second stage of the ABCNN paper's benchmarks (Yin et al. 2016, sec. 5).

Metrics, as the paper reports them:
    wikiqa  MAP and MRR over questions, candidates ranked by the positive-class ("1") score;
            questions without a correct answer are not counted (the loader already drops them
            from dev/test)
    msrp    accuracy and F1 of the paraphrase class ("1")
    sick    3-way accuracy
    scitail accuracy (entails / neutral; the AttConv paper's Table 5, no feature stage)

Second stage: the paper feeds hand-made features beside the network's similarity scores into
its final logistic regression. Here a logistic regression (standardised inputs, sklearn
defaults otherwise) takes the network's log-probabilities plus the task's features; it is fitted
on dev, after training, and scored on test. Fitting on dev rather than train follows Yu et al.
(2014), whose CNN + word-count combination the paper's WikiQA baselines reuse: on train the
network's own scores are overconfident, so a fit there would learn to ignore the features.

Features (what the paper lists, and what is reproducible here):
    wikiqa  all 4 of sec. 5.2.1: question length, answer length, WordCnt (non-stopword question
            words that occur in the answer) and WgtWordCnt (the same, IDF-weighted; IDF over the
            train candidate sentences)
    msrp    5 of 18 (sec. 5.3.1): the two sentence lengths, ROUGE-1, ROUGE-2, ROUGE-SU4 (F1).
            The 15 MT metrics of Madnani et al. (2012) (BLEU/NIST/TER/TERp/METEOR/SEPIA/BADGER/
            MAXSIM variants) need those tools and resources and are not reproduced
    sick    5 of 24 (sec. 5.4.1): NEG, LEN00, LEN10, LEN0N, LEN1N. The 15 MT metrics and the
            WordNet features SYN, HYP0, HYP1, ANT (WordNet is not installed here) are not

Pure numpy + scikit-learn (no torch): the logits come from the caller.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from training.examples import PairExample

POSITIVE_LABEL = "1"  # MSRP paraphrase / WikiQA answer
NEGATION_WORDS = frozenset({"no", "not", "nobody", "isn't"})  # the paper's NEG list (sec. 5.4.1)
ROUGE_SU_SKIP = 4  # ROUGE-SU4: skip-bigrams with at most 4 words between, plus unigrams
_WORD = re.compile(r"[\w']+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, apostrophes); punctuation dropped."""
    return _WORD.findall(text.lower())


# --- metrics ---------------------------------------------------------------------------------


def average_precision(relevant: Sequence[bool], scores: Sequence[float]) -> float:
    """AP of one question's ranking (highest score first; ties keep the given order)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    ranked = np.asarray(relevant, dtype=bool)[order]
    hits = np.flatnonzero(ranked)
    if hits.size == 0:
        raise ValueError("average precision of a question without a relevant candidate")
    return float(np.mean(np.arange(1, hits.size + 1) / (hits + 1)))


def reciprocal_rank(relevant: Sequence[bool], scores: Sequence[float]) -> float:
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    hits = np.flatnonzero(np.asarray(relevant, dtype=bool)[order])
    if hits.size == 0:
        raise ValueError("reciprocal rank of a question without a relevant candidate")
    return 1.0 / float(hits[0] + 1)


def ranking_metrics(groups: Sequence[Hashable], relevant: Sequence[bool], scores: Sequence[float]) -> dict[str, Any]:
    """MAP and MRR over the groups (questions) that have at least one relevant candidate;
    `questions_skipped` counts those that have none."""
    members: dict[Hashable, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    relevant = np.asarray(relevant, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    aps, rrs, skipped = [], [], 0
    for idx in members.values():
        if not relevant[idx].any():
            skipped += 1
            continue
        aps.append(average_precision(relevant[idx], scores[idx]))
        rrs.append(reciprocal_rank(relevant[idx], scores[idx]))
    if not aps:
        raise ValueError("no question has a relevant candidate")
    return {"map": float(np.mean(aps)), "mrr": float(np.mean(rrs)), "questions": len(aps), "questions_skipped": skipped}


def binary_metrics(y_true: Sequence[int], y_pred: Sequence[int]) -> dict[str, Any]:
    """Accuracy and F1 of class 1."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    tp = int(((y_true == 1) & (y_pred == 1)).sum())
    fp = int(((y_true == 0) & (y_pred == 1)).sum())
    fn = int(((y_true == 1) & (y_pred == 0)).sum())
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return {"accuracy": float((y_true == y_pred).mean()), "f1": float(f1), "examples": int(y_true.size)}


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def task_metrics(task: str, examples: Sequence[PairExample], labels: Sequence[str], scores: np.ndarray) -> dict[str, Any]:
    """The paper's metrics for `task` from per-class scores (N, C) in `labels` order (logits,
    log-probabilities or probabilities: only their order within a row, or of the positive
    column across a question, matters)."""
    gold = np.array([list(labels).index(e.label) for e in examples])
    if task == "wikiqa":
        positive = list(labels).index(POSITIVE_LABEL)
        # rank by the positive class's log-odds against the rest (exact where p is near 1)
        scores = np.asarray(scores, dtype=np.float64)
        others = np.delete(scores, positive, axis=1)
        peak = others.max(axis=1, keepdims=True)
        rest = peak[:, 0] + np.log(np.exp(others - peak).sum(axis=1))
        return ranking_metrics([e.premise for e in examples], gold == positive, scores[:, positive] - rest)
    predictions = np.asarray(scores).argmax(axis=1)
    if task == "msrp":
        positive = list(labels).index(POSITIVE_LABEL)
        return binary_metrics(gold == positive, predictions == positive)
    if task in ("sick", "scitail"):
        return {"accuracy": float((predictions == gold).mean()), "examples": int(gold.size)}
    raise ValueError(f"unknown benchmark task {task!r}; expected wikiqa, msrp, sick or scitail")


# datasets whose pairs are a ranking (candidates per question): selected and reported by MAP/MRR
RANKING_DATASETS = ("wikiqa",)


def selection_metric(task: str, examples: Sequence[PairExample], labels: Sequence[str]):
    """The dev score a training run selects its weights on: MAP for WikiQA (accuracy says little
    where 88% of dev candidates are wrong answers), accuracy otherwise."""
    key = "map" if task == "wikiqa" else "accuracy"
    examples = list(examples)
    return lambda logits: task_metrics(task, examples, labels, logits)[key]


# --- features --------------------------------------------------------------------------------


def inverse_document_frequencies(sentences: Iterable[str]) -> tuple[dict[str, float], float]:
    """(word -> idf, idf of an unseen word) over `sentences` as documents (each counted once)."""
    unique = set(sentences)
    df: Counter = Counter()
    for sentence in unique:
        df.update(set(words(sentence)))
    n = len(unique)
    return {w: math.log((1 + n) / (1 + c)) + 1 for w, c in df.items()}, math.log(1 + n) + 1


def word_count_features(examples: Sequence[PairExample], idf: dict[str, float], unseen_idf: float) -> np.ndarray:
    """WikiQA's 4 features per pair (sec. 5.2.1): question length, answer length, WordCnt,
    WgtWordCnt -> (N, 4)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    rows = []
    for e in examples:
        question, answer = words(e.premise), words(e.hypothesis)
        in_answer = set(answer)
        matched = [w for w in question if w not in ENGLISH_STOP_WORDS and w in in_answer]
        rows.append([len(question), len(answer), len(matched), sum(idf.get(w, unseen_idf) for w in matched)])
    return np.asarray(rows, dtype=np.float64).reshape(-1, 4)


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _skip_bigrams(tokens: Sequence[str], max_skip: int) -> Counter:
    return Counter((tokens[i], tokens[j]) for i in range(len(tokens)) for j in range(i + 1, min(len(tokens), i + max_skip + 2)))


def _overlap_f1(a: Counter, b: Counter) -> float:
    total_a, total_b = sum(a.values()), sum(b.values())
    if not total_a or not total_b:
        return 0.0
    overlap = sum((a & b).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / total_a, overlap / total_b
    return 2 * precision * recall / (precision + recall)


def rouge_scores(a: Sequence[str], b: Sequence[str]) -> tuple[float, float, float]:
    """(ROUGE-1, ROUGE-2, ROUGE-SU4) F1 of two token lists (symmetric: F1 of counts overlap)."""
    su4 = _skip_bigrams(a, ROUGE_SU_SKIP) + _ngrams(a, 1), _skip_bigrams(b, ROUGE_SU_SKIP) + _ngrams(b, 1)
    return _overlap_f1(_ngrams(a, 1), _ngrams(b, 1)), _overlap_f1(_ngrams(a, 2), _ngrams(b, 2)), _overlap_f1(*su4)


def paraphrase_features(examples: Sequence[PairExample]) -> np.ndarray:
    """MSRP's reproducible features: len(s0), len(s1), ROUGE-1, ROUGE-2, ROUGE-SU4 -> (N, 5)."""
    rows = []
    for e in examples:
        a, b = words(e.premise), words(e.hypothesis)
        rows.append([len(a), len(b), *rouge_scores(a, b)])
    return np.asarray(rows, dtype=np.float64).reshape(-1, 5)


def non_overlapping(a: Sequence[str], b: Sequence[str]) -> tuple[list[str], list[str]]:
    """NONOVER (sec. 5.4): each sentence without the words that occur in both."""
    shared = set(a) & set(b)
    return [w for w in a if w not in shared], [w for w in b if w not in shared]


EMPTY_SENTENCE = "<empty>"  # the paper's token for a sentence NONOVER removed entirely


def nonover_examples(examples: Sequence[PairExample]) -> list[PairExample]:
    """The NONOVER copy of SICK pairs (sec. 5.4, Table 5): words shared by both sentences
    removed (lower-cased word tokens, punctuation dropped), "<empty>" where nothing is left."""
    out = []
    for e in examples:
        a, b = non_overlapping(words(e.premise), words(e.hypothesis))
        out.append(PairExample(" ".join(a) or EMPTY_SENTENCE, " ".join(b) or EMPTY_SENTENCE, e.label))
    return out


def entailment_features(examples: Sequence[PairExample]) -> np.ndarray:
    """SICK's reproducible features: NEG, LEN00, LEN10, LEN0N, LEN1N -> (N, 5)."""
    rows = []
    for e in examples:
        a, b = words(e.premise), words(e.hypothesis)
        a_n, b_n = non_overlapping(a, b)
        negation = float(bool(NEGATION_WORDS & (set(a) | set(b))))
        rows.append([negation, len(a), len(b), len(a_n), len(b_n)])
    return np.asarray(rows, dtype=np.float64).reshape(-1, 5)


FEATURE_NAMES: dict[str, tuple[str, ...]] = {
    "wikiqa": ("len_question", "len_answer", "WordCnt", "WgtWordCnt"),
    "msrp": ("len_s0", "len_s1", "ROUGE-1", "ROUGE-2", "ROUGE-SU4"),
    "sick": ("NEG", "LEN00", "LEN10", "LEN0N", "LEN1N"),
}


@dataclass
class FeatureExtractor:
    """The task's hand-made features; WikiQA's IDF table comes from the train sentences."""

    task: str
    idf: dict[str, float] | None = None
    unseen_idf: float = 0.0

    @classmethod
    def fit(cls, task: str, train: Sequence[PairExample]) -> "FeatureExtractor":
        if task not in FEATURE_NAMES:
            raise ValueError(f"unknown benchmark task {task!r}; expected one of {sorted(FEATURE_NAMES)}")
        if task == "wikiqa":
            idf, unseen = inverse_document_frequencies(e.hypothesis for e in train)
            return cls(task, idf, unseen)
        return cls(task)

    def __call__(self, examples: Sequence[PairExample]) -> np.ndarray:
        if self.task == "wikiqa":
            return word_count_features(examples, self.idf or {}, self.unseen_idf)
        if self.task == "msrp":
            return paraphrase_features(examples)
        return entailment_features(examples)


class FeatureStage:
    """Logistic regression over [network log-probabilities, features], fitted on dev."""

    def __init__(self, seed: int = 0) -> None:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=seed))

    @staticmethod
    def inputs(logits: np.ndarray, features: np.ndarray) -> np.ndarray:
        return np.concatenate([log_softmax(np.asarray(logits, dtype=np.float64)), features], axis=1)

    def fit(self, logits: np.ndarray, features: np.ndarray, gold: Sequence[int]) -> "FeatureStage":
        self.model.fit(self.inputs(logits, features), np.asarray(gold))
        return self

    def scores(self, logits: np.ndarray, features: np.ndarray, num_labels: int) -> np.ndarray:
        """(N, num_labels) log-probabilities; a class absent from the fitting data gets -inf."""
        probs = self.model.predict_proba(self.inputs(logits, features))
        out = np.full((probs.shape[0], num_labels), -np.inf)
        out[:, self.model.classes_] = np.log(np.clip(probs, 1e-300, None))
        return out


__all__ = [
    "FEATURE_NAMES",
    "FeatureExtractor",
    "FeatureStage",
    "average_precision",
    "binary_metrics",
    "entailment_features",
    "inverse_document_frequencies",
    "nonover_examples",
    "paraphrase_features",
    "ranking_metrics",
    "reciprocal_rank",
    "rouge_scores",
    "selection_metric",
    "task_metrics",
    "word_count_features",
    "words",
]
