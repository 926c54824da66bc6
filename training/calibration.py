"""Temperature scaling (Guo et al. 2017) and expected calibration error. numpy + scipy only.

A single temperature T > 0 divides every logit: probabilities softmax(logits / T) keep the
argmax (so accuracy is unchanged) but are less (T > 1) or more (T < 1) confident. T is fitted
by minimising the negative log-likelihood of held-out (dev) labels; the service applies it
(`card.calibration.temperature` in config.json).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, softmax

# T is searched in [exp(-LOG_T_BOUND), exp(LOG_T_BOUND)] = [~0.018, ~55].
LOG_T_BOUND = 4.0


def _check(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if logits.ndim != 2 or labels.shape != (logits.shape[0],):
        raise ValueError(f"logits (N, C) and labels (N,) expected, got {logits.shape} and {labels.shape}")
    if len(labels) == 0:
        raise ValueError("no examples")
    if labels.min() < 0 or labels.max() >= logits.shape[1]:
        raise ValueError(f"labels outside 0..{logits.shape[1] - 1}")
    return logits, labels


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
    """Mean negative log-likelihood of `labels` under softmax(logits / temperature)."""
    logits, labels = _check(logits, labels)
    logp = log_softmax(logits / temperature, axis=1)
    return float(-logp[np.arange(len(labels)), labels].mean())


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The T > 0 minimising the NLL of softmax(logits / T) (bounded Brent search on log T;
    deterministic)."""
    logits, labels = _check(logits, labels)
    rows = np.arange(len(labels))

    def objective(log_t: float) -> float:
        logp = log_softmax(logits / np.exp(log_t), axis=1)
        return float(-logp[rows, labels].mean())

    result = minimize_scalar(objective, bounds=(-LOG_T_BOUND, LOG_T_BOUND), method="bounded",
                             options={"xatol": 1e-6})
    return float(np.exp(result.x))


def calibrated_probs(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=1)


def expected_calibration_error(probs: np.ndarray, labels: np.ndarray, bins: int = 15) -> float:
    """ECE with `bins` equal-width confidence bins over (0, 1]: sum over bins of
    (share of examples in the bin) * |accuracy - mean confidence| in the bin, where the
    confidence is the top probability and a prediction is its argmax."""
    probs, labels = _check(probs, labels)
    return ece_from_confidence(probs.max(axis=1), probs.argmax(axis=1) == labels, bins)


def ece_from_confidence(confidence: np.ndarray, correct: np.ndarray, bins: int = 15) -> float:
    """ECE from each prediction's confidence and whether it was right (for predictions that
    are not a plain argmax, e.g. labels mapped onto another label space)."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if confidence.ndim != 1 or correct.shape != confidence.shape or len(confidence) == 0:
        raise ValueError(f"confidence and correct must be equal-length non-empty vectors, got {confidence.shape}, {correct.shape}")
    if bins < 1:
        raise ValueError("bins must be >= 1")
    # bin b holds confidences in (b/bins, (b+1)/bins]; a confidence of 0 goes to bin 0
    index = np.clip(np.ceil(confidence * bins).astype(np.int64) - 1, 0, bins - 1)
    counts = np.bincount(index, minlength=bins)
    conf_sum = np.bincount(index, weights=confidence, minlength=bins)
    acc_sum = np.bincount(index, weights=correct, minlength=bins)
    filled = counts > 0
    gap = np.abs(acc_sum[filled] - conf_sum[filled])  # = count * |accuracy - confidence|
    return float(gap.sum() / len(confidence))
