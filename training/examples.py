"""The examples readers produce and the trainer consumes, one type per task."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence, Union


@dataclass(frozen=True)
class TextExample:  # classification
    text: str
    label: str


@dataclass(frozen=True)
class PairExample:  # entailment (premise, hypothesis)
    premise: str
    hypothesis: str
    label: str


@dataclass(frozen=True)
class ClaimExample:  # verification (claim, evidence list)
    claim: str
    evidence: tuple[str, ...]
    label: str
    # index in `evidence` of the sentence that decides the label, when known (built data):
    # the target of the auxiliary evidence loss; None for NOT ENOUGH INFO or unknown
    gold_evidence: int | None = None


Example = Union[TextExample, PairExample, ClaimExample]

TASK_OF = {TextExample: "classification", PairExample: "entailment", ClaimExample: "verification"}


def texts_of(example: Example) -> list[str]:
    """Every text in an example (for building a vocabulary)."""
    if isinstance(example, TextExample):
        return [example.text]
    if isinstance(example, PairExample):
        return [example.premise, example.hypothesis]
    return [example.claim, *example.evidence]


@dataclass
class DatasetSplits:
    """A dataset ready for training: fixed splits, label order, and where it came from."""

    name: str
    task: str
    labels: list[str]  # output order of the classifier
    train: list[Example]
    dev: list[Example]
    test: list[Example]
    checksums: dict[str, str] = field(default_factory=dict)  # source file -> sha256
    description: str = ""
    # A mixed dataset (nli-mix): split -> the source dataset of each of its examples, in order;
    # empty for a single-source dataset. Training then selects on the mean per-source dev accuracy.
    sources: dict[str, list[str]] = field(default_factory=dict)


def subsample(examples: Sequence[Example], count: int | None, seed: int) -> list[Example]:
    """A seeded random subset of `count` examples, kept in their original order."""
    if count is None or count >= len(examples):
        return list(examples)
    keep = sorted(random.Random(seed).sample(range(len(examples)), count))
    return [examples[i] for i in keep]
