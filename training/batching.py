"""Examples -> padded id arrays, through the service's encoding (core.encoding: one
examples -> ids step for training, export parity and serving)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Sequence

import numpy as np

from core.encoding import encode_fields
from core.tasks import TASKS, Task
from core.tokenization import TextEncoder, pad_2d, pad_3d
from training.examples import Example, form_of


def task_inputs(task: Task, examples: Sequence[Example]) -> list[SimpleNamespace]:
    """`examples` as inputs of `task`: each record's texts (in form order) under the task's field
    names, so a task reads any record of its form whatever its fields are called."""
    form = form_of(examples[0]) if examples else task.form
    if form is not task.form:
        raise ValueError(f"task {task.name} takes {task.form.value} inputs, not {type(examples[0]).__name__} ({form.value})")
    names = task.field_names
    return [SimpleNamespace(**dict(zip(names, example.texts, strict=True))) for example in examples]


def encode_examples(
    encoder: TextEncoder,
    examples: Sequence[Example],
    max_lengths: dict[str, int],
    max_evidence: int | None = None,
    *,
    task: str | Task,
) -> tuple[np.ndarray, ...]:
    """Ids arrays in the task's input order: (input_ids,), (premise_ids, hypothesis_ids) or
    (claim_ids, evidence_ids (B, K, L)) for the current tasks. Texts are cut to
    `max_lengths[input]`; list fields to `max_evidence` texts. `task` (a name of core.tasks or a
    Task) is the split's (its dataset's, a bundle's config.task): never guessed from the records or
    the limits. The encoding is the service's (core.encoding.encode_fields)."""
    if not examples:
        raise ValueError("no examples to encode")
    spec = TASKS[task] if isinstance(task, str) else task
    fields = encode_fields(encoder, spec, task_inputs(spec, examples), max_lengths, max_texts=max_evidence)
    return tuple(pad_3d(f.per_input()) if f.field.many else pad_2d(f.encoded.ids) for f in fields)


def label_ids(examples: Sequence[Example], labels: Sequence[str]) -> np.ndarray:
    index = {label: i for i, label in enumerate(labels)}
    return np.array([index[e.label] for e in examples], dtype=np.int64)
