"""Out-of-domain (OOD) development sets: how a bundled model holds up on text unlike its
training data. For model selection and reporting only, NEVER for training; the product does
not need them at run time (no service/ code reads them).

The files live in $ATTSERVE_OOD_DIR (default: <repo>/../shared/data/ood-dev, see
/work/shared/data/README.md):

- ``snli_1.0_dev.jsonl``: SNLI official dev, {premise, hypothesis, label} 3-way.
- ``rte_train_dev.jsonl``: GLUE RTE train + dev, {premise, hypothesis, label, tag},
  label entailment / not_entailment.
- ``fever_symmetric_v0.2_dev.jsonl``: FEVER-Symmetric v0.2 dev, {claim, evidence (one
  sentence), label SUPPORTS / REFUTES}.

How each set is put to each model task (``OodSet.examples[i].label`` is the OOD gold label,
in the set's own label space ``OodSet.labels``):

entailment models (labels entailment / neutral / contradiction)
  - snli-dev: PairExample(premise, hypothesis), 3-way as is; predicted label = argmax.
  - rte: PairExample(premise, hypothesis), gold entailment / not_entailment; predicted
    "entailment" if the argmax is entailment, else "not_entailment" (neutral and
    contradiction both collapse onto not_entailment).
  - fever-symmetric: PairExample(premise=evidence, hypothesis=claim), gold
    SUPPORTS -> entailment, REFUTES -> contradiction; predicted label = argmax, so a
    neutral argmax is always wrong.
verification models (labels SUPPORTS / REFUTES / NOT ENOUGH INFO)
  - fever-symmetric: ClaimExample(claim, (evidence,)), gold SUPPORTS / REFUTES;
    predicted label = argmax (NOT ENOUGH INFO always wrong).
  - rte: ClaimExample(hypothesis, (premise,)), gold entailment -> SUPPORTS,
    not_entailment -> "NOT SUPPORTS"; predicted SUPPORTS iff argmax is SUPPORTS, else
    NOT SUPPORTS.
  - snli-dev: ClaimExample(hypothesis, (premise,)), entailment -> SUPPORTS,
    contradiction -> REFUTES, neutral -> NOT ENOUGH INFO; 3-way.
classification models: no OOD sets.

Metrics (``OodSet.metrics``): examples, accuracy, macro_f1 (over the set's labels; a
prediction outside them counts as wrong for every class), majority (accuracy of always
predicting the set's most frequent gold label) and labels. Where the set is 2-way and the
model 3-way and each set label is one model label (fever-symmetric for both tasks),
also accuracy_two_way / macro_f1_two_way: the argmax restricted to those two model labels
(e.g. SUPPORTS vs REFUTES), i.e. the model may not answer with its third label. For rte
the 3 -> 2 collapse (entailment vs the rest) already is the two-way decision, so no
separate two-way figure is given.

Label names of the model are matched case-insensitively (SICK-style ENTAILMENT works too).

Model selection (``selection_score``): the mean of the in-domain dev accuracy and the mean
OOD accuracy over the sets given, so in-domain and out-of-domain weigh equally whatever the
number of OOD sets; with no OOD sets it is the in-domain dev accuracy.

This module must not import torch (it is used by the ONNX-only ``attserve card`` too).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from core.tasks import entailment, verification
from training.examples import ClaimExample, Example, PairExample

log = logging.getLogger(__name__)

OOD_DIR_ENV = "ATTSERVE_OOD_DIR"
DEFAULT_OOD_DIR = Path(__file__).resolve().parents[1].parent / "shared/data/ood-dev"

SNLI_FILE = "snli_1.0_dev.jsonl"
RTE_FILE = "rte_train_dev.jsonl"
FEVER_FILE = "fever_symmetric_v0.2_dev.jsonl"

SUPPORTS, REFUTES, NOT_ENOUGH_INFO, NOT_SUPPORTS = "SUPPORTS", "REFUTES", "NOT ENOUGH INFO", "NOT SUPPORTS"
SNLI_LABELS = ["entailment", "neutral", "contradiction"]  # labels (data), not task names
# the two tasks whose models these sets are made for (their inputs and labels)
ENTAILMENT_TASK, VERIFICATION_TASK = entailment.TASK.name, verification.TASK.name
VERIFICATION_OF_SNLI = {"entailment": SUPPORTS, "contradiction": REFUTES, "neutral": NOT_ENOUGH_INFO}
SAMPLE_SEED = 13


def ood_dir(root: str | Path | None = None) -> Path:
    """`root`, else $ATTSERVE_OOD_DIR, else the shared default."""
    if root is not None:
        return Path(root)
    env = os.environ.get(OOD_DIR_ENV)
    return Path(env) if env else DEFAULT_OOD_DIR


@dataclass
class OodSet:
    name: str  # "snli-dev", "rte", "fever-symmetric"
    task: str  # the model task it is for (core.tasks): entailment's or verification's
    examples: list[Example]  # .label is the OOD gold label, one of `labels`
    labels: list[str]  # the OOD label space
    # model label (lower-cased) -> set label it counts as; model labels not listed are wrong
    prediction_map: dict[str, str] = field(default_factory=dict)
    # set label -> the one model label (lower-cased) it corresponds to, for the two-way
    # restricted argmax; None when not defined for this set
    two_way: dict[str, str] | None = None

    def __len__(self) -> int:
        return len(self.examples)

    def fits(self, model_labels: Sequence[str]) -> bool:
        """Whether a model with these labels can be scored on this set: it has every label the
        set's prediction_map reads (a SciTail model's entails / neutral cannot answer SNLI's
        three-way dev)."""
        return set(self.prediction_map) <= {label.lower() for label in model_labels}

    def gold(self) -> np.ndarray:
        index = {label: i for i, label in enumerate(self.labels)}
        return np.array([index[e.label] for e in self.examples], dtype=np.int64)

    def predictions(self, logits: np.ndarray, model_labels: Sequence[str]) -> np.ndarray:
        """Predicted set-label indices (-1: a model label that maps to no set label)."""
        logits = _check_logits(logits, len(self.examples), model_labels)
        index = {label: i for i, label in enumerate(self.labels)}
        lowered = [label.lower() for label in model_labels]
        unknown = set(self.prediction_map) - set(lowered)
        if unknown:
            raise ValueError(f"{self.name}: model labels {list(model_labels)} lack {sorted(unknown)}")
        to_set = np.array([index.get(self.prediction_map.get(label, ""), -1) for label in lowered], dtype=np.int64)
        return to_set[np.argmax(logits, axis=1)]

    def confidences(self, probs: np.ndarray, model_labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(predicted set-label indices as in `predictions`, confidence of each prediction):
        the total probability of the model labels that map onto the predicted set label
        (e.g. P(neutral) + P(contradiction) for a not_entailment prediction), or the top
        probability when the argmax maps to no set label. For calibration (ECE) on the set."""
        probs = _check_logits(probs, len(self.examples), model_labels).astype(np.float64)
        predicted = self.predictions(probs, model_labels)
        index = {label: i for i, label in enumerate(self.labels)}
        to_set = np.array([index.get(self.prediction_map.get(label.lower(), ""), -1) for label in model_labels])
        mass = np.zeros((len(probs), len(self.labels)), dtype=np.float64)
        for column, target in enumerate(to_set):
            if target >= 0:
                mass[:, target] += probs[:, column]
        rows = np.arange(len(probs))
        confidence = np.where(predicted >= 0, mass[rows, np.maximum(predicted, 0)], probs.max(axis=1))
        return predicted, confidence

    def metrics(self, logits: np.ndarray, model_labels: Sequence[str]) -> dict[str, Any]:
        """examples, accuracy, macro_f1, majority, labels (+ accuracy_two_way /
        macro_f1_two_way where defined); see the module docstring."""
        gold = self.gold()
        predicted = self.predictions(logits, model_labels)
        out: dict[str, Any] = {"examples": int(len(gold)), **_scores(gold, predicted, len(self.labels))}
        counts = Counter(gold.tolist())
        out["majority"] = float(max(counts.values()) / len(gold)) if len(gold) else 0.0
        out["labels"] = list(self.labels)
        if self.two_way is not None and len(model_labels) > len(self.labels):
            lowered = [label.lower() for label in model_labels]
            columns = [lowered.index(self.two_way[label]) for label in self.labels]
            restricted = np.asarray(logits, dtype=np.float64)[:, columns]
            two = _scores(gold, np.argmax(restricted, axis=1), len(self.labels))
            out["accuracy_two_way"] = two["accuracy"]
            out["macro_f1_two_way"] = two["macro_f1"]
        return out


def _check_logits(logits: np.ndarray, n: int, model_labels: Sequence[str]) -> np.ndarray:
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape != (n, len(model_labels)):
        raise ValueError(f"logits of shape {logits.shape}, expected ({n}, {len(model_labels)})")
    return logits


def _scores(gold: np.ndarray, predicted: np.ndarray, n_labels: int) -> dict[str, float]:
    from sklearn.metrics import f1_score

    if len(gold) == 0:
        return {"accuracy": 0.0, "macro_f1": 0.0}
    return {
        "accuracy": float(np.mean(gold == predicted)),
        "macro_f1": float(f1_score(gold, predicted, labels=list(range(n_labels)), average="macro", zero_division=0)),
    }


def _ood_file(folder: Path, name: str) -> Path:
    """`folder/name`, or its xz-compressed copy `name.xz` (a training pack holds those)."""
    plain = folder / name
    return plain if plain.is_file() or not (folder / f"{name}.xz").is_file() else folder / f"{name}.xz"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    import lzma

    with (lzma.open(path, "rt", encoding="utf-8") if path.suffix == ".xz" else path.open(encoding="utf-8")) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _sample(rows: list[dict[str, Any]], max_examples: int | None) -> list[dict[str, Any]]:
    """All rows, or a fixed-seed random subset of `max_examples` in file order."""
    if max_examples is None or max_examples >= len(rows):
        return rows
    keep = np.sort(np.random.default_rng(SAMPLE_SEED).choice(len(rows), size=max_examples, replace=False))
    return [rows[i] for i in keep]


def _entailment_sets(folder: Path, max_examples: int | None) -> list[OodSet]:
    sets = []
    snli = _sample([r for r in _read_jsonl(_ood_file(folder, SNLI_FILE)) if r["label"] in SNLI_LABELS], max_examples)
    sets.append(OodSet(
        "snli-dev", ENTAILMENT_TASK,
        [PairExample(r["premise"], r["hypothesis"], r["label"]) for r in snli],
        list(SNLI_LABELS), prediction_map={label: label for label in SNLI_LABELS},
    ))
    rte = _sample(_read_jsonl(_ood_file(folder, RTE_FILE)), max_examples)
    sets.append(OodSet(
        "rte", ENTAILMENT_TASK,
        [PairExample(r["premise"], r["hypothesis"], r["label"]) for r in rte],
        ["entailment", "not_entailment"],
        prediction_map={"entailment": "entailment", "neutral": "not_entailment", "contradiction": "not_entailment"},
    ))
    fever = _sample(_read_jsonl(_ood_file(folder, FEVER_FILE)), max_examples)
    gold = {SUPPORTS: "entailment", REFUTES: "contradiction"}
    sets.append(OodSet(
        "fever-symmetric", ENTAILMENT_TASK,
        [PairExample(r["evidence"], r["claim"], gold[r["label"]]) for r in fever],
        ["entailment", "contradiction"],
        prediction_map={"entailment": "entailment", "contradiction": "contradiction"},
        two_way={"entailment": "entailment", "contradiction": "contradiction"},
    ))
    return sets


def _verification_sets(folder: Path, max_examples: int | None) -> list[OodSet]:
    sets = []
    fever = _sample(_read_jsonl(_ood_file(folder, FEVER_FILE)), max_examples)
    sets.append(OodSet(
        "fever-symmetric", VERIFICATION_TASK,
        [ClaimExample(r["claim"], (r["evidence"],), r["label"]) for r in fever],
        [SUPPORTS, REFUTES],
        prediction_map={SUPPORTS.lower(): SUPPORTS, REFUTES.lower(): REFUTES},
        two_way={SUPPORTS: SUPPORTS.lower(), REFUTES: REFUTES.lower()},
    ))
    rte = _sample(_read_jsonl(_ood_file(folder, RTE_FILE)), max_examples)
    gold = {"entailment": SUPPORTS, "not_entailment": NOT_SUPPORTS}
    sets.append(OodSet(
        "rte", VERIFICATION_TASK,
        [ClaimExample(r["hypothesis"], (r["premise"],), gold[r["label"]]) for r in rte],
        [SUPPORTS, NOT_SUPPORTS],
        prediction_map={SUPPORTS.lower(): SUPPORTS, REFUTES.lower(): NOT_SUPPORTS, NOT_ENOUGH_INFO.lower(): NOT_SUPPORTS},
    ))
    snli = _sample([r for r in _read_jsonl(_ood_file(folder, SNLI_FILE)) if r["label"] in SNLI_LABELS], max_examples)
    labels = [SUPPORTS, REFUTES, NOT_ENOUGH_INFO]
    sets.append(OodSet(
        "snli-dev", VERIFICATION_TASK,
        [ClaimExample(r["hypothesis"], (r["premise"],), VERIFICATION_OF_SNLI[r["label"]]) for r in snli],
        labels, prediction_map={label.lower(): label for label in labels},
    ))
    return sets


# The sets are made for two tasks' models alone (their labels and inputs): by task name
# (core.tasks), the reader of each one's sets. Any other task has none.
_SETS_OF_TASK = {ENTAILMENT_TASK: _entailment_sets, VERIFICATION_TASK: _verification_sets}


def ood_sets(task: str, root: str | Path | None = None, max_examples: int | None = None) -> list[OodSet]:
    """The OOD dev sets for a model task ([] for a task they are not made for, e.g.
    classification, or when the folder is missing: logged as a warning). `max_examples` keeps a fixed-seed subset of each set."""
    readers = _SETS_OF_TASK.get(task)
    if readers is None:
        return []
    folder = ood_dir(root)
    missing = [name for name in (SNLI_FILE, RTE_FILE, FEVER_FILE) if not _ood_file(folder, name).is_file()]
    if missing:
        log.warning("ood sets unavailable", extra={"ood_dir": str(folder), "missing": missing, "task": task})
        return []
    sets = readers(folder, max_examples)
    log.info("ood sets loaded", extra={"ood_dir": str(folder), "task": task, "sets": {s.name: len(s) for s in sets}})
    return sets


def selection_score(in_domain_dev_accuracy: float, ood: dict[str, dict]) -> float:
    """Mean of the in-domain dev accuracy and the mean OOD accuracy over `ood` (set name ->
    metrics with "accuracy"); the in-domain dev accuracy alone when `ood` is empty."""
    if not ood:
        return float(in_domain_dev_accuracy)
    ood_mean = float(np.mean([float(m["accuracy"]) for m in ood.values()]))
    return 0.5 * (float(in_domain_dev_accuracy) + ood_mean)
