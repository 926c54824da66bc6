"""Examples -> padded id arrays, through the service's encoding (core.encoding: one
examples -> ids step for training, export parity and serving)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from core.encoding import encode_fields, task_of_fields
from core.tokenization import TextEncoder, pad_2d, pad_3d
from training.examples import Example


def encode_examples(
    encoder: TextEncoder,
    examples: Sequence[Example],
    max_lengths: dict[str, int],
    max_evidence: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Ids arrays in the task's input order: (input_ids,), (premise_ids, hypothesis_ids) or
    (claim_ids, evidence_ids (B, K, L)). Texts are cut to `max_lengths[input]`; evidence lists
    to `max_evidence` sentences. The encoding is the service's (core.encoding.encode_fields)."""
    first = examples[0]
    if not dataclasses.is_dataclass(first):
        raise TypeError(f"not an example: {type(first).__name__}")
    task = task_of_fields([f.name for f in dataclasses.fields(first)])
    fields = encode_fields(encoder, task, examples, max_lengths, max_texts=max_evidence)
    return tuple(pad_3d(f.per_input()) if f.field.many else pad_2d(f.encoded.ids) for f in fields)


def label_ids(examples: Sequence[Example], labels: Sequence[str]) -> np.ndarray:
    index = {label: i for i, label in enumerate(labels)}
    return np.array([index[e.label] for e in examples], dtype=np.int64)
