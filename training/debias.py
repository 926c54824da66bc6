"""A bias-only model for product-of-experts training (`[train] debias = "statement-only"`).

SNLI-style data lets a model guess the label from the hypothesis alone (negation words for
contradiction, vague words for neutral; Gururangan et al. 2018, Poliak et al. 2018), and a
verification set built from it lets it guess from the claim alone. A network that leans on
those cues fails on data where they do not hold (FEVER-Symmetric was built to show that for
claims; Schuster et al. 2019). Product-of-experts training (Clark et al. 2019; He et al. 2019)
adds the bias model's log-probabilities to the network's logits in the loss only, so the
network is paid for what the statement alone cannot tell.

The bias model is TF-IDF + logistic regression on the statement (hypothesis or claim) alone,
the baseline's features (training.baseline). Each training example gets the log-probabilities
of a model fitted on the other folds (cross-fitting): a model scored on its own training data
would be right far more often than the cue warrants, and the network would be told to ignore
examples it still has to learn.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression

from training.baseline import _pair_of, _vectorizer
from training.examples import Example

log = logging.getLogger(__name__)

FOLDS = 5
# Fixed, not tuned per recipe: the bias model's job is to be the cue, not to be best on dev.
BIAS_C = 1.0


@dataclass(frozen=True)
class BiasPrior:
    log_probs: np.ndarray  # (N, C) float32, out-of-fold log-probabilities of each training example
    accuracy: float  # out-of-fold accuracy of the statement-only model: how strong the cue is
    majority: float  # share of the most frequent label, the accuracy of guessing without the cue


def statement_only_prior(examples: Sequence[Example], labels: Sequence[str], seed: int = 0,
                         folds: int = FOLDS) -> BiasPrior:
    """Out-of-fold log-probabilities of a statement-only TF-IDF + LR model for `examples`
    (entailment or verification), columns in `labels` order."""
    if folds < 2 or len(examples) < folds:
        raise ValueError(f"cross-fitting needs at least {max(2, folds)} examples and 2 folds")
    started = time.perf_counter()
    statements = [_pair_of(e)[1] for e in examples]
    index = {label: i for i, label in enumerate(labels)}
    y = np.array([index[e.label] for e in examples])
    fold_of = np.random.default_rng(seed).permutation(len(examples)) % folds
    log_probs = np.zeros((len(examples), len(labels)), dtype=np.float32)
    for fold in range(folds):
        held_out, fitted = fold_of == fold, fold_of != fold
        vectorizer = _vectorizer()
        x_fit = vectorizer.fit_transform([s for s, keep in zip(statements, fitted) if keep])
        model = LogisticRegression(C=BIAS_C, max_iter=2000, random_state=seed)
        model.fit(x_fit, y[fitted])
        fold_log_probs = np.full((int(held_out.sum()), len(labels)), -30.0, dtype=np.float32)  # a label unseen in the fold
        fold_log_probs[:, model.classes_] = model.predict_log_proba(vectorizer.transform([s for s, keep in zip(statements, held_out) if keep]))
        log_probs[held_out] = fold_log_probs
    prior = BiasPrior(
        log_probs=log_probs,
        accuracy=float((log_probs.argmax(-1) == y).mean()),
        majority=float(np.bincount(y, minlength=len(labels)).max() / len(y)),
    )
    log.info("statement-only bias", extra={"examples": len(examples), "folds": folds, "accuracy": round(prior.accuracy, 4),
                                           "majority": round(prior.majority, 4), "seconds": round(time.perf_counter() - started, 1)})
    return prior


__all__ = ["BiasPrior", "statement_only_prior"]
