"""The baseline every network must beat: TF-IDF features + logistic regression (scikit-learn),
trained on the same train split and scored on the same dev/test splits as the networks.

Features, what a user would try first:
- classification: TF-IDF of the text (word uni+bigrams, sublinear tf).
- entailment: TF-IDF of the premise and, separately, of the hypothesis, plus TF-IDF of the
  hypothesis words that do NOT occur in the premise (what the hypothesis adds is what
  decides neutral/contradiction) and the share of hypothesis words found in the premise.
- verification: the same pair features with claim as the hypothesis and the concatenated
  evidence sentences as the premise.
The regularisation strength C is picked on dev from a small grid; the model refits nothing
on dev.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from core.tasks import TASKS, TaskForm
from training.examples import ClaimExample, DatasetSplits, Example, PairExample, TextExample

if TYPE_CHECKING:
    from training.ood import OodSet

log = logging.getLogger(__name__)

C_GRID = (0.25, 1.0, 4.0, 16.0)


def _vectorizer(ngrams: tuple[int, int] = (1, 2)) -> TfidfVectorizer:
    return TfidfVectorizer(lowercase=True, ngram_range=ngrams, min_df=2, sublinear_tf=True, dtype=np.float32)


def _pair_of(example: Example) -> tuple[str, str]:
    """(context, statement): premise/hypothesis, or concatenated evidence/claim."""
    if isinstance(example, PairExample):
        return example.premise, example.hypothesis
    if isinstance(example, ClaimExample):
        return " ".join(example.evidence), example.claim
    raise TypeError(f"not a pair example: {type(example).__name__}")


class TfidfFeatures:
    """Fits on train texts; turns examples into one sparse feature matrix."""

    def __init__(self, task: str) -> None:
        self.task = task
        # one text: TF-IDF of it; two texts (a pair, or a text and its list): context/statement features
        self.single = TASKS[task].form is TaskForm.TEXT
        if self.single:
            self.text = _vectorizer()
        else:
            self.context, self.statement, self.novel = _vectorizer(), _vectorizer(), _vectorizer((1, 1))
            self._words = _vectorizer((1, 1)).build_analyzer()  # same tokenisation as the features

    def _novel_and_overlap(self, pairs: Sequence[tuple[str, str]]) -> tuple[list[str], np.ndarray]:
        novel, overlap = [], np.zeros((len(pairs), 1), dtype=np.float32)
        for i, (context, statement) in enumerate(pairs):
            seen = set(self._words(context))
            words = self._words(statement)
            novel.append(" ".join(w for w in words if w not in seen))
            overlap[i, 0] = sum(w in seen for w in words) / max(1, len(words))
        return novel, overlap

    def fit_transform(self, examples: Sequence[Example]) -> sparse.csr_matrix:
        return self._features(examples, fit=True)

    def transform(self, examples: Sequence[Example]) -> sparse.csr_matrix:
        return self._features(examples, fit=False)

    def _features(self, examples: Sequence[Example], fit: bool) -> sparse.csr_matrix:
        def apply(vectorizer: TfidfVectorizer, texts: list[str]):
            return vectorizer.fit_transform(texts) if fit else vectorizer.transform(texts)

        if self.single:
            if not all(isinstance(e, TextExample) for e in examples):
                raise TypeError(f"the {self.task} baseline (one text) needs TextExample data")
            return apply(self.text, [e.text for e in examples]).tocsr()
        pairs = [_pair_of(e) for e in examples]
        novel, overlap = self._novel_and_overlap(pairs)
        blocks = [
            apply(self.context, [c for c, _ in pairs]),
            apply(self.statement, [s for _, s in pairs]),
            apply(self.novel, novel),
            sparse.csr_matrix(overlap),
        ]
        return sparse.hstack(blocks, format="csr")


def run_baseline(
    splits: DatasetSplits,
    max_train_examples: int | None = None,
    seed: int = 0,
    c_grid: Sequence[float] = C_GRID,
    ood: Sequence["OodSet"] | None = None,
) -> dict[str, Any]:
    """Fit TF-IDF + logistic regression on train, pick C on dev; returns
    {"dev": metrics, "test": metrics, "C": chosen, "features": n, "fit_seconds": s} with the
    same metrics dicts as `training.trainer.evaluate`. With `ood` (training.ood sets of the
    task) also "ood_dev": {set name: OodSet.metrics of the fitted model's log-probabilities},
    whose "majority" field is the majority-guess baseline of each set."""
    from training.examples import subsample
    from training.metrics import classification_metrics

    train = subsample(splits.train, max_train_examples, seed)
    index = {label: i for i, label in enumerate(splits.labels)}
    y_train = np.array([index[e.label] for e in train])
    y_dev = np.array([index[e.label] for e in splits.dev])
    y_test = np.array([index[e.label] for e in splits.test])

    started = time.perf_counter()
    features = TfidfFeatures(splits.task)
    x_train = features.fit_transform(train)
    x_dev, x_test = features.transform(splits.dev), features.transform(splits.test)
    best: tuple[float, float, LogisticRegression] | None = None
    for c in c_grid:
        model = LogisticRegression(C=c, max_iter=2000, random_state=seed)
        model.fit(x_train, y_train)
        accuracy = float((model.predict(x_dev) == y_dev).mean())
        log.info("baseline fit", extra={"dataset": splits.name, "C": c, "dev_accuracy": accuracy})
        if best is None or accuracy > best[0]:
            best = (accuracy, c, model)
    if best is None:
        raise ValueError("c_grid is empty")
    _, c, model = best
    result = {
        "dev": classification_metrics(y_dev, model.predict(x_dev), splits.labels),
        "test": classification_metrics(y_test, model.predict(x_test), splits.labels),
        "C": c,
        "features": int(x_train.shape[1]),
        "train_examples": len(train),
        "fit_seconds": round(time.perf_counter() - started, 2),
    }
    if ood:
        # columns of predict_log_proba follow model.classes_ (label indices seen in train)
        model_labels = [splits.labels[i] for i in model.classes_]
        result["ood_dev"] = {}
        for dataset in ood:
            scores = model.predict_log_proba(features.transform(dataset.examples))
            result["ood_dev"][dataset.name] = metrics = dataset.metrics(scores, model_labels)
            log.info("baseline ood", extra={"dataset": splits.name, "set": dataset.name, "accuracy": metrics["accuracy"],
                                            "macro_f1": metrics["macro_f1"], "majority": metrics["majority"]})
    return result


__all__ = ["run_baseline", "TfidfFeatures"]
