"""Classification metrics shared by the trainer, the TF-IDF baseline and the cards."""

from __future__ import annotations

from typing import Any, Sequence


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int], labels: Sequence[str]) -> dict[str, Any]:
    """Accuracy, per-class precision/recall/F1/support, macro F1 and the confusion matrix
    (rows = true label, columns = predicted, both in `labels` order)."""
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

    index = list(range(len(labels)))
    precision, recall, f1, support = precision_recall_fscore_support(
        y_true, y_pred, labels=index, zero_division=0
    )
    return {
        "examples": int(len(y_true)),
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "macro_f1": float(f1_score(y_true, y_pred, labels=index, average="macro", zero_division=0)),
        "per_class": {
            label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support)
        },
        "labels": list(labels),
        "confusion_matrix": confusion_matrix(y_true, y_pred, labels=index).tolist(),
    }
