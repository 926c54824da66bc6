"""The examples readers produce and the trainer consumes, one record type per task FORM
(core.tasks.TaskForm), not per task: `TextExample` holds one text, `PairExample` two,
`ClaimExample` a text and a list of texts. A record's `texts` are its texts in form order, which
a task's fields (core.tasks) take positionally (training.batching), so a pair task whose fields
are not named premise/hypothesis reads `PairExample`s too. The task of a split is its dataset's
(core.tasks.TASK_OF_DATASET, `DatasetSplits.task`), never guessed from the record type."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

from core.tasks import TaskForm


@dataclass(frozen=True)
class TextExample:  # one text (TEXT form)
    text: str
    label: str

    @property
    def texts(self) -> tuple[str]:
        return (self.text,)


@dataclass(frozen=True)
class PairExample:  # two texts (PAIR form): the first (premise), the second (hypothesis)
    premise: str
    hypothesis: str
    label: str

    @property
    def texts(self) -> tuple[str, str]:
        return (self.premise, self.hypothesis)


@dataclass(frozen=True)
class ClaimExample:  # a text and a list of texts (CONTEXTS form): claim, evidence list
    claim: str
    evidence: tuple[str, ...]
    label: str
    # index in `evidence` of the sentence that decides the label, when known (built data):
    # the target of the auxiliary evidence loss; None for NOT ENOUGH INFO or unknown
    gold_evidence: int | None = None

    @property
    def texts(self) -> tuple[str, tuple[str, ...]]:
        return (self.claim, self.evidence)


Example = Union[TextExample, PairExample, ClaimExample]

# record type -> the form of the tasks whose inputs it holds
FORM_OF: dict[type, TaskForm] = {TextExample: TaskForm.TEXT, PairExample: TaskForm.PAIR, ClaimExample: TaskForm.CONTEXTS}


def form_of(example: Example) -> TaskForm:
    """The form of the tasks `example` can be an input of (TypeError for no example record)."""
    form = FORM_OF.get(type(example))
    if form is None:
        raise TypeError(f"not an example: {type(example).__name__}")
    return form


def texts_of(example: Example) -> list[str]:
    """Every text in an example (for building a vocabulary)."""
    form_of(example)
    return [text for part in example.texts for text in ((part,) if isinstance(part, str) else part)]


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


def rename_labels(splits: DatasetSplits, names: Mapping[str, str]) -> DatasetSplits:
    """`splits` with each label spelled as `names` says (a label it does not name keeps its
    spelling; the order stays): a dataset's "0"/"1" served as words."""
    unknown = sorted(set(names) - set(splits.labels))
    renamed = [names.get(label, label) for label in splits.labels]
    if unknown or len(set(renamed)) != len(renamed):
        raise ValueError(f"label_names {dict(names)} must rename labels of {splits.labels} to distinct names"
                         + (f" ({unknown} are not among them)" if unknown else ""))

    def split(examples: Sequence[Example]) -> list[Example]:
        return [dataclasses.replace(e, label=names.get(e.label, e.label)) for e in examples]

    return dataclasses.replace(splits, labels=renamed, train=split(splits.train), dev=split(splits.dev),
                               test=split(splits.test))

