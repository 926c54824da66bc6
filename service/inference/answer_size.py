"""The least size an answer with explanations (`"explain": true`) can have, known before
inference from the request's token counts, so a request whose answer cannot fit in
`max_answer_bytes` is refused at once: not after its explanation was computed, converted and
serialised, which for 64 claims x 16 evidence sentences took seconds and hundreds of MB.

An explanation lists every token the model read (a JSON object per token) and, for an
attention model, a weight per pair of tokens (rows x columns per alignment, one per token for
token weights). Each has a shortest JSON form; the floor is their count times it, so a
request it refuses could never have been answered. The count of the tokens a text keeps is
the tokenizer's on a prefix of the text long enough to hold the max length's tokens: a prefix
never has more tokens than its text (each of its words is, or begins, one of the text's), so
the count stays a lower bound while its cost stays bounded by the max length.
"""

from __future__ import annotations

from typing import Any, Sequence

from core.tasks import TASKS, TEXT_FIELD_OF_INPUT

# the shortest token object of an explanation, and its comma
TOKEN_JSON_FLOOR = len('{"token":"","start":0,"end":0,"unknown":true},')
# the shortest weight: "0.0" (weights are floats), and its comma
WEIGHT_JSON_FLOOR = len("0.0,")
# characters of a text tokenized per token of its max length; a word is rarely longer
PREFIX_CHARS_PER_TOKEN = 16


def explanation_floor(runtime: Any, inputs: Sequence[Any]) -> int:
    """The fewest bytes the explanations of `inputs` (objects with the task's fields) can take
    in the JSON answer of `runtime`'s model (a service.inference.runtime.ModelRuntime)."""
    config = runtime.config
    task = TASKS[config.task]
    prefixes: list[str] = []
    for x in inputs:
        for field in task.fields:
            length = config.max_lengths[field.input] * PREFIX_CHARS_PER_TOKEN
            value = getattr(x, field.name)
            prefixes += [t[:length] for t in value] if field.many else [value[:length]]
    encodings = runtime.encoder.tokenizer.encode_batch_fast(prefixes, add_special_tokens=False)
    kept = iter([len(e.ids) for e in encodings])
    spec = config.explanation
    total = 0
    for x in inputs:
        # per field: the kept token count of each text (a list for a list field)
        counts: dict[str, Any] = {}
        for field in task.fields:
            limit = config.max_lengths[field.input]
            if field.many:
                counts[field.name] = [min(limit, next(kept)) for _ in getattr(x, field.name)]
                total += sum(counts[field.name]) * TOKEN_JSON_FLOOR
            else:
                counts[field.name] = min(limit, next(kept))
                total += counts[field.name] * TOKEN_JSON_FLOOR
        if spec is None:
            continue
        rows = counts[TEXT_FIELD_OF_INPUT[spec.rows]]
        if spec.kind == "token_weights":
            total += rows * WEIGHT_JSON_FLOOR
            continue
        columns = counts[TEXT_FIELD_OF_INPUT[spec.columns]]
        cells = sum(rows * c for c in columns) if isinstance(columns, list) else rows * columns
        total += cells * WEIGHT_JSON_FLOOR
    return total
