"""Examples -> padded id arrays, through the service's encoder (one encoding path for
training, export parity and serving)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from core.tokenization import TextEncoder, pad_2d, pad_3d
from training.examples import ClaimExample, Example, PairExample, TextExample


def encode_examples(
    encoder: TextEncoder,
    examples: Sequence[Example],
    max_lengths: dict[str, int],
    max_evidence: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Ids arrays in the task's input order: (input_ids,), (premise_ids, hypothesis_ids) or
    (claim_ids, evidence_ids (B, K, L)). Texts are cut to `max_lengths[input]`; evidence lists
    to `max_evidence` sentences."""
    first = examples[0]
    if isinstance(first, TextExample):
        return (pad_2d(encoder.encode([e.text for e in examples], max_lengths["input_ids"]).ids),)
    if isinstance(first, PairExample):
        premise = encoder.encode([e.premise for e in examples], max_lengths["premise_ids"]).ids
        hypothesis = encoder.encode([e.hypothesis for e in examples], max_lengths["hypothesis_ids"]).ids
        return pad_2d(premise), pad_2d(hypothesis)
    if isinstance(first, ClaimExample):
        claims = encoder.encode([e.claim for e in examples], max_lengths["claim_ids"]).ids
        groups = [list(e.evidence[: max_evidence or len(e.evidence)]) for e in examples]
        flat = encoder.encode([s for g in groups for s in g], max_lengths["evidence_ids"]).ids
        nested, start = [], 0
        for g in groups:
            nested.append(flat[start : start + len(g)])
            start += len(g)
        return pad_2d(claims), pad_3d(nested)
    raise TypeError(f"not an example: {type(first).__name__}")


def label_ids(examples: Sequence[Example], labels: Sequence[str]) -> np.ndarray:
    index = {label: i for i, label in enumerate(labels)}
    return np.array([index[e.label] for e in examples], dtype=np.int64)
