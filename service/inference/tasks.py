"""A task's inputs in the service: the checks before any expensive work, and the encoding into
a runtime item, both read from the task's fields (core.tasks). The engine (service.inference.engine: the checks) and its
batcher (which tokenizes in its inference thread, a whole queue at a time) go through here,
for the task API and the Open Inference Protocol alike; the bench uses the same encoder.

An input is any object with the task's fields as attributes (the request schemas, or a
SimpleNamespace built from protocol tensors): `text`; `premise`, `hypothesis`; `claim`,
`evidence` (a list of sentences, a list field).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import add, attrgetter
from typing import Any, Sequence

from core.encoding import encode_fields
from core.tasks import TASKS, Task
from core.tokenization import TextTooLong, ascii_texts_pass, check_text
from service.inference.errors import InvalidInput, set_by
from service.inference.runtime import Item, ModelRuntime


def check_texts(inputs: Sequence[Any], task: str, batch: bool, max_text_chars: int, max_request_chars: int) -> None:
    """422 before tokenizing for a text over the length limits (before or after NFKC) or with
    no visible character; the budget of normalized characters is shared by the request. A
    request of ASCII texts that passes is told in one step (core.tokenization.ascii_texts_pass);
    the others are checked text by text, which also words the error."""
    if ascii_texts_pass(all_texts(TASKS[task], inputs), min(max_text_chars, max_request_chars), max_request_chars):
        return
    budget = max_request_chars
    for i, x in enumerate(inputs):
        prefix = f"inputs[{i}]." if batch else ""
        for field, text in TASKS[task].named_texts(x):
            where = prefix + field
            if len(text) > max_text_chars:
                raise InvalidInput(f"{where}: {len(text)} characters; at most {max_text_chars} "
                                   f"{set_by('max_text_chars')}")
            try:
                check = check_text(text, min(max_text_chars, budget))
            except TextTooLong as exc:
                if exc.limit < max_text_chars:
                    raise InvalidInput(f"{where}: the request's texts come to more than {max_request_chars} "
                                       "characters after Unicode (NFKC) normalization "
                                       f"{set_by('max_request_chars')}") from None
                raise InvalidInput(f"{where}: more than {max_text_chars} characters after Unicode (NFKC) "
                                   f"normalization {set_by('max_text_chars')}") from None
            if not check.visible:
                raise InvalidInput(f"{where}: no visible character after Unicode (NFKC) normalization "
                                   "(only whitespace, control or zero-width characters)")
            budget -= check.normalized_length


def all_texts(task: Task, inputs: Sequence[Any]) -> list[str]:
    """Every text of `inputs`, field by field (a list field's texts flattened)."""
    texts: list[str] = []
    for f in task.fields:
        values = map(attrgetter(f.name), inputs)
        texts += chain.from_iterable(values) if f.many else values
    return texts


@dataclass(frozen=True, slots=True)
class Encoded:
    """One input, encoded: its item, whether a text lost tokens to the max length, or why it
    cannot run (a text with no tokens after normalisation)."""

    item: Item | None
    truncated: bool
    error: str | None = None
    tokens: dict | None = None  # asked for an explanation: its token part (token_ids)
    unknown_share: float = 0.0  # share of the tokens the model reads that are outside its vocabulary


def unknown_share(unknown: int, total: int) -> float:
    """The answers' `unknown_token_share`: unknown / total tokens read, to 4 decimals."""
    return round(unknown / total, 4) if total else 0.0


def token_ids(runtime: ModelRuntime, inputs: Sequence[Any],
              explain: Sequence[bool] | None = None) -> list[tuple[tuple, bool, dict | None, float]]:
    """Token ids per graph input of each input (evidence: a list of id lists), whether it
    lost tokens, (`explain[i]`) the token part of its explanation, from the same
    tokenization: `{"tokens": {field: the tokens the model read}, "cut_tokens": {field: how
    many it did not}}` (evidence: one entry per sentence), and the share of the tokens it
    reads (every field) that are outside the vocabulary; one `encode_batch` per field over
    all the inputs."""
    config = runtime.config
    n = len(inputs)
    wanted = list(explain) if explain is not None else [False] * n
    fields = encode_fields(runtime.encoder, TASKS[config.task], inputs, config.max_lengths, describe=wanted)
    per_field = [f.per_input() for f in fields]
    # per input, over its fields: tokens cut (an input lost tokens when the sum is above 0),
    # unknown tokens, tokens read; a plain field's lists added element-wise in C
    cut, unknown, total = [0] * n, [0] * n, [0] * n
    for f in fields:
        encoded = f.encoded
        if f.field.many:  # one entry per text of the input
            lengths = encoded.lengths
            for i, (start, end) in enumerate(f.spans()):
                cut[i] += sum(encoded.cut[start:end])
                unknown[i] += sum(encoded.unknown[start:end])
                total[i] += sum(lengths[start:end])
        else:
            cut = list(map(add, cut, encoded.cut))
            unknown = list(map(add, unknown, encoded.unknown))
            total = list(map(add, total, map(len, encoded.ids)))
    tokens: list[dict | None] = [None] * n
    if any(wanted):
        tokens = [{"tokens": {}, "cut_tokens": {}} if w else None for w in wanted]
        for f in fields:
            encoded, name = f.encoded, f.field.name
            for i, (start, end) in enumerate(f.spans()):
                if tokens[i] is not None:
                    many = f.field.many
                    tokens[i]["tokens"][name] = encoded.tokens[start:end] if many else encoded.tokens[i]
                    tokens[i]["cut_tokens"][name] = encoded.cut[start:end] if many else encoded.cut[i]
    return [(row, c > 0, t, unknown_share(u, all_)) for row, c, t, u, all_ in
            zip(zip(*per_field), cut, tokens, unknown, total, strict=True)]


def encode(runtime: ModelRuntime, inputs: Sequence[Any], explain: Sequence[bool] | None = None) -> list[Encoded]:
    """The runtime items of `inputs`, in order (the batcher calls this in its inference
    thread for everything that queued since its last batch); `explain[i]` adds input i's tokens."""
    out = []
    many = [f.many for f in TASKS[runtime.config.task].fields]
    plain = not any(many)
    make_item = runtime.make_item
    for row, truncated, tokens, share in token_ids(runtime, inputs, explain):
        if not all(row) if plain else any(not t for ids, is_list in zip(row, many) for t in (ids if is_list else [ids])):
            out.append(Encoded(None, truncated, "a text has no tokens after normalisation"))
        else:
            out.append(Encoded(make_item(row), truncated, tokens=tokens, unknown_share=share))
    return out
