"""A task's inputs -> token ids per graph input: the one examples -> ids step of training, the
export's parity check, the cards and the service. `core.tasks` says which fields a task's inputs
have (request bodies carry them as attributes of the same names; training's records of the task's
form are given those names by training.batching), and
`core.tokenization` encodes each field's texts in one batch.

Training pads what this returns into arrays (`training.batching.encode_examples`); the service
turns it into runtime items with their truncation, unknown-token share and explanation tokens
(`service.tasks.token_ids`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence

from core.tasks import Task, TextField
from core.tokenization import Encoded, TextEncoder
from core.transformers_bundle import TemplateEncoder


@dataclass(frozen=True)
class FieldEncoding:
    """One field of a task over many inputs: its texts encoded in input order (a list field's
    texts flattened) and, for a list field, how many texts each input has."""

    field: TextField
    encoded: Encoded
    counts: list[int] | None = None

    @cached_property
    def _spans(self) -> list[tuple[int, int]]:
        if self.counts is None:
            return [(i, i + 1) for i in range(len(self.encoded.ids))]
        out, at = [], 0
        for n in self.counts:
            out.append((at, at + n))
            at += n
        return out

    def spans(self) -> list[tuple[int, int]]:
        """(start, end) of each input's texts in `encoded` (one text each for a plain field);
        computed once, as the service reads them twice (ids, then truncation and counts)."""
        return self._spans

    def per_input(self) -> list:
        """Each input's ids: a list of ids, or (a list field) a list of id lists."""
        if self.counts is None:
            return self.encoded.ids
        return [self.encoded.ids[start:end] for start, end in self.spans()]


def encode_fields(encoder: TextEncoder, task: Task, inputs: Sequence[Any], max_lengths: Mapping[str, int], *,
                  describe: Sequence[bool] | None = None, max_texts: int | None = None) -> list[FieldEncoding]:
    """Per field of `task`, in graph-input order: every input's text(s) of that field, cut to
    `max_lengths[field.input]` tokens, one `encode` call per field over all the inputs.
    `describe[i]` asks for input i's tokens too (explanations); `max_texts` keeps the first
    texts of a list field only (training cuts long evidence lists; the service refuses them).
    A transformers bundle's encoder cuts a pair together, to its one sequence length
    (core.transformers_bundle)."""
    if isinstance(encoder, TemplateEncoder):
        return [FieldEncoding(field, encoded, counts) for field, encoded, counts in
                encoder.encode_fields(task, inputs, max(max_lengths[f.input] for f in task.fields), describe)]
    out = []
    for field in task.fields:
        max_length = max_lengths[field.input]
        if field.many:
            lists = [getattr(x, field.name) for x in inputs]
            if max_texts:
                lists = [texts[:max_texts] for texts in lists]
            flat = [text for texts in lists for text in texts]
            flags = None if describe is None else [wanted for texts, wanted in zip(lists, describe) for _ in texts]
            out.append(FieldEncoding(field, encoder.encode(flat, max_length, flags), [len(texts) for texts in lists]))
        else:
            out.append(FieldEncoding(field, encoder.encode([getattr(x, field.name) for x in inputs], max_length, describe)))
    return out


__all__ = ["FieldEncoding", "encode_fields"]
