"""`POST /tokenize`: how a served model's tokenizer cuts a request's texts (issue 54), as
text-embeddings-inference's /tokenize answers it, per text field of the model's task.

The body is the one the model's task endpoint takes (what you would send to /entailment, one
input or `{"inputs": [...]}`): the same validation, limits and errors. The model is `model`
(any served model: its task says which fields the body must have), or, without it, the
default model of the one task whose text fields the body has (core.tasks: `premise` and
`hypothesis` are entailment's, `sentence1` and `sentence2` paraphrase's, ...). `explain`,
`truncate` and the rerank flags change nothing here.

The answer of one input, per text field (a list field such as `evidence`: one entry per text):

    {"model": "nli", "version": "1", "fields": {"premise": {
        "tokens": [{"token": "a", "id": 7, "start": 0, "end": 1, "unknown": false}, ...],
        "count": 9, "max_length": 24, "truncated": false}, ...}}

`tokens` are those the model reads (at most its max length for the field, as explanations
list them): the token in the vocabulary's form (an unknown word: its normalized text), the id
the model gets (an unknown word's hashed bucket), the character span [start, end) in the text
as sent, in Unicode code points (so text[start:end] in Python, or Array.from(text) in
JavaScript, cuts it out), and whether it is outside the vocabulary. `count` is every token of
the text, the cut ones too; `truncated` is count > max_length: a task endpoint would cut the
text there (or answer 422 with "truncate": false). Tokens come from the bundle's own encoder,
through the function the batcher tokenizes with (core.encoding.encode_fields), so they are what
the model sees. Tokenizing and writing the answer (megabytes for many long texts) run in a
thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
import unicodedata
import weakref
from typing import Any, Sequence

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from core.encoding import encode_fields
from core.tasks import TASKS, Task
from core.tokenization import TextEncoder
from service import tracing
from service.inference.errors import AnswerTooLarge, InvalidInput, UnknownModel, excerpt, set_by
from service.http.routes import ANSWER_JSON, IGNORED_FIELDS_HEADER, admit_request, ignored_header, service_of
from service.inference.runtime import ModelRuntime
from service.http.schemas import TASK_SCHEMAS, ErrorBody
from service.inference.tasks import check_texts

ENDPOINT = "/tokenize"
LABEL = "tokenize"  # the `endpoint` metric label
_BODIES = {name: TypeAdapter(schemas.body) for name, schemas in TASK_SCHEMAS.items()}
_FIELD_SETS = " | ".join(" + ".join(task.field_names) for task in TASKS.values())


class TokenInfo(BaseModel):
    token: str = Field(description="the token as the model's vocabulary has it (an unknown word: its normalized text)")
    id: int = Field(description="the id the model reads (an unknown word: its hashed out-of-vocabulary bucket)")
    start: int = Field(description="offset of its first character in the text sent, in Unicode code points")
    end: int = Field(description="offset just past its last character, in Unicode code points")
    unknown: bool = Field(description="outside the model's vocabulary")


class TextTokens(BaseModel):
    tokens: list[TokenInfo] = Field(description="the tokens the model reads, at most max_length")
    count: int = Field(description="tokens of the whole text, those past max_length included")
    max_length: int = Field(description="the model's max length for this field, in tokens")
    truncated: bool = Field(description="count > max_length: the task endpoint cuts the text after max_length tokens")


class Tokenized(BaseModel):
    model: str
    version: str | None = None
    fields: dict[str, TextTokens | list[TextTokens]] = Field(
        description="per text field of the model's task; a list field (evidence, texts): one entry per text")


class TokenizedBatch(BaseModel):
    results: list[Tokenized]


def _pick_task(raw: dict, service: Any) -> tuple[str | None, str]:
    """(the model named, its task), or (None, the task whose text fields the body has)."""
    model = raw.get("model")
    if model is not None:
        if not isinstance(model, str):
            raise InvalidInput("model: expected a string (a model name; /v1/models lists them)")
        entry = service.models.get(model)
        if entry is None or entry.task is None:
            raise UnknownModel(f"unknown model {excerpt(model)}; models: {sorted(service.models)}")
        return model, entry.task
    inputs = raw.get("inputs")
    first = inputs[0] if isinstance(inputs, list) and inputs and isinstance(inputs[0], dict) else raw
    try:
        return None, _task_of_body(first).name
    except ValueError:
        raise InvalidInput(f"body: name a model (\"model\": \"...\") or send one task's text fields ({_FIELD_SETS}), "
                           "as its endpoint takes them") from None


def _task_of_body(body: dict) -> Task:
    """The one task whose text fields a model-less body holds, all of them (`/tokenize` takes the
    body as the task's endpoint does, and each task's fields differ); ValueError otherwise."""
    matches = [task for task in TASKS.values() if set(task.field_names) <= set(body)]
    if len(matches) != 1:
        raise ValueError(f"fields {sorted(body)} match {len(matches)} tasks, not one")
    return matches[0]


# Unicode's White_Space characters: where the WhitespaceSplit pre-tokenizer splits (Rust's
# char::is_whitespace; Python's str.isspace also takes \x1c-\x1f)
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_REPLACED: "weakref.WeakKeyDictionary[TextEncoder, frozenset[str]]" = weakref.WeakKeyDictionary()


def replaced_strings(encoder: TextEncoder) -> frozenset[str]:
    """The literal strings the tokenizer's normalizer replaces (training.tokenizer's PTB
    escapes: "-LRB-" -> "(", ...), read once per encoder."""
    found = _REPLACED.get(encoder)
    if found is None:
        normalizer = json.loads(encoder.tokenizer.to_str()).get("normalizer") or {}
        steps = normalizer.get("normalizers") if normalizer.get("type") == "Sequence" else [normalizer]
        found = frozenset(step["pattern"]["String"] for step in steps or ()
                          if step.get("type") == "Replace" and (step.get("pattern") or {}).get("String"))
        _REPLACED[encoder] = found
    return found


def _composes(char: str) -> bool:
    """A character NFKC may compose into the one before it: a combining mark, or a Hangul
    vowel or final consonant jamo."""
    return unicodedata.category(char) in ("Mn", "Mc", "Me") or "\u1160" <= char <= "\u11ff"


def whole_spans(text: str, tokens: list[dict], replaced: frozenset[str], normalize: Any) -> list[dict]:
    """`tokens` (describe_tokens', in order) with spans that cover all the characters they came
    from. The tokenizers library's offsets leave two kinds of character in no span: what a
    replacement replaced but its last character ("-LRB-" -> "(" is given the last "-" only),
    and a combining mark NFKC composed into the character before it ("e" + U+0301 -> "é" is
    given the "e" only). So a token's start moves back over uncovered characters when they and
    its own make exactly a replaced string (after NFKC, as the normalizer matched it), and a
    token's end moves on over the uncovered characters right after it that compose; an
    unknown token's text is then its whole span normalized, as describe_tokens makes it."""
    if not tokens:
        return tokens
    longest = max(map(len, replaced), default=0)
    covered = 0  # the end of the spans so far
    previous: list[dict] = []  # the tokens of the span before (one source character may give several)
    k = 0
    while k < len(tokens):
        start, end = tokens[k]["start"], tokens[k]["end"]
        group = [tokens[k]]
        while k + len(group) < len(tokens) and (tokens[k + len(group)]["start"], tokens[k + len(group)]["end"]) == (start, end):
            group.append(tokens[k + len(group)])
        if start > covered:
            for new_start in range(max(covered, start - 4 * longest), start) if replaced else ():
                if unicodedata.normalize("NFKC", text[new_start:end]) in replaced:
                    _respan(group, text, new_start, end, normalize)
                    start = new_start
                    break
            composed = covered
            while previous and composed < start and _composes(text[composed]):
                composed += 1
            if composed > covered:
                _respan(previous, text, previous[0]["start"], composed, normalize)
        covered = max(covered, end)
        previous = group
        k += len(group)
    composed = covered
    while composed < len(text) and _composes(text[composed]):
        composed += 1
    if composed > covered:
        _respan(previous, text, previous[0]["start"], composed, normalize)
    return tokens


def _respan(group: list[dict], text: str, start: int, end: int, normalize: Any) -> None:
    for t in group:
        t["start"], t["end"] = start, end
        if t["unknown"]:
            t["token"] = normalize(text[start:end])


def tokenize_inputs(runtime: ModelRuntime, inputs: Sequence[Any]) -> list[dict[str, Any]]:
    """Per input, per text field of the runtime's task: its tokens, count, max length and
    whether it is cut (`fields` of an answer; the module's docstring). Tokenizes, so runs in a
    thread."""
    config = runtime.config
    task = TASKS[config.task]
    encoder = runtime.encoder
    encoded = encode_fields(encoder, task, inputs, config.max_lengths, describe=[True] * len(inputs))
    replaced = replaced_strings(encoder)
    normalizer = encoder.tokenizer.normalizer
    normalize = normalizer.normalize_str if normalizer is not None else (lambda text: text)
    out: list[dict[str, Any]] = [{} for _ in inputs]
    for f in encoded:
        e, max_length = f.encoded, config.max_lengths[f.field.input]
        texts = [t for x in inputs for t in (getattr(x, f.field.name) if f.field.many else [getattr(x, f.field.name)])]

        def text(k: int) -> dict[str, Any]:
            tokens = [{"token": t["token"], "id": token_id, "start": t["start"], "end": t["end"], "unknown": t["unknown"]}
                      for t, token_id in zip(e.tokens[k], e.ids[k], strict=True)]
            tokens = whole_spans(texts[k], tokens, replaced, normalize)
            count = len(e.ids[k]) + e.cut[k]
            return {"tokens": tokens, "count": count, "max_length": max_length, "truncated": e.cut[k] > 0}

        for i, (start, end) in enumerate(f.spans()):
            out[i][f.field.name] = [text(k) for k in range(start, end)] if f.field.many else text(start)
    return out


def tokenized_answer(runtime: ModelRuntime, inputs: Sequence[Any], batch: bool, model: str,
                     version: str) -> tuple[bytes, int]:
    """The answer's JSON, and when its tokenizing ended (time.time_ns), both in the caller's
    worker thread: the answer of many long texts runs to megabytes (5.9 MB took 76-192 ms to
    write), which on the event loop stalled every other connection and probe."""
    fields = tokenize_inputs(runtime, inputs)
    tokenized_ns = time.time_ns()
    results = [{"model": model, "version": version, "fields": f} for f in fields]
    return ANSWER_JSON.dump_json({"results": results} if batch else results[0]), tokenized_ns


router = APIRouter()


@router.post(ENDPOINT, response_model=Tokenized | TokenizedBatch, tags=["inference"], name="tokenize",
             responses={code: {"model": ErrorBody} for code in (404, 413, 415, 422, 503)},
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
                 "type": "object", "description": "the body of the model's task endpoint (one input or "
                 "{\"inputs\": [...]}), with or without `model`"}}}}})
async def tokenize(body: dict[str, Any], request: Request) -> Response:
    """How the model's tokenizer cuts each text: the tokens it reads, with their character
    offsets, ids and whether each is unknown, the token count, and whether the text is cut at
    the model's max length. Send the body you would send to the model's task endpoint."""
    service = service_of(request)
    named, task = _pick_task(body, service)
    try:
        parsed = _BODIES[task].validate_python(body)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
    version = getattr(parsed, "version", None)  # a model version, where the schemas take one
    entry = admit_request(service, request.scope.setdefault("state", {}), named, task, version)
    trace = tracing.current()
    batch = "inputs" in type(parsed).model_fields
    inputs = parsed.inputs if batch else [parsed]
    listed = TASKS[task].list_field
    counts = () if listed is None else (
        (f"inputs[{i}].{listed.name}" if batch else listed.name, len(getattr(x, listed.name)))
        for i, x in enumerate(inputs))
    entry.engine.check_sizes(len(inputs), counts)
    settings = service.settings
    check_texts(inputs, task, batch, settings.max_text_chars, settings.max_request_chars)
    began = time.time_ns()
    served = getattr(entry, "version", None) or entry.config.version
    content, tokenized_ns = await asyncio.to_thread(tokenized_answer, entry.runtime, inputs, batch, entry.name, served)
    if trace is not None:
        trace.tokenized(began, tokenized_ns)
        trace.serialised(tokenized_ns)
    if len(content) > settings.max_answer_bytes:
        raise AnswerTooLarge(f"the answer is {len(content)} bytes, over {settings.max_answer_bytes} "
                             f"{set_by('max_answer_bytes')}; send fewer inputs per request")
    headers = {}
    if ignored := parsed.ignored_fields():
        headers[IGNORED_FIELDS_HEADER] = ignored_header(ignored)
    return Response(content, media_type="application/json", headers=headers)
