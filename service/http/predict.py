"""Text Embeddings Inference's classification contract: `POST /predict`, so a client written for
TEI (huggingface_hub's InferenceClient.text_classification, TEI's own examples) works unchanged.

`inputs` is a text, a pair `[a, b]`, or a list of either (TEI's parse: a list of exactly two
texts is ONE pair, as in TEI; a batch of two texts is not expressible, send them one by one or
with a third). A text runs on a classification model, a pair on an entailment model: the task's
default, or the model `model` names (any served model whose task takes one text, or a pair, and
answers labels: paraphrase too). The answer is TEI's: `[{"label", "score"}, ...]` best first for
one input, a list of those for a batch. It is a thin adapter over the dataplane
(service.inference.dataplane), so its limits, metrics (`endpoint="predict"`) and errors are the
task endpoints'; its error bodies are TEI's `{"error": "...", "error_type": "..."}` (with the
service's stable `code` beside them: service.http.errors.error_response).

- `raw_scores: true`: TEI answers the logits; the engine hands out probabilities
  softmax(logits / T) only, so this answers T * log(probability), i.e. the logits less each
  input's log-sum-exp: the same order and differences as the logits, not their level.
- `truncate` defaults to false as in TEI: a text longer than the model's max length is a 422.
- `truncation_direction`: "Right" (the engine cuts the end); "Left" is a 422.
- `parameters`: the Hugging Face Inference API's task payload, `{"inputs": ..., "parameters":
  {...}}`, which huggingface_hub's InferenceClient sends: `function_to_apply` "none" is
  `raw_scores` ("softmax" the default; "sigmoid" is a 422), `top_k` keeps the best k labels,
  and the answer is that API's shape, a list of rankings even for one text.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, ClassVar, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from core.tasks import TASKS, classification, entailment
from core.tasks.base import TaskForm
from service.http.errors import EndpointBody, json_type, register_body
from service.http.routes import (ANSWER_JSON, IGNORED_FIELDS_HEADER, admit_request, ignored_header, ran_headers,
                                 refuse_truncated, run_request, service_of)
from service.http.schemas import ModelName, Text, RequestBody, valid_text
from service.inference.registry import Service

ENDPOINT = "/predict"
LABEL = "predict"  # the `endpoint` metric label
# the task whose default model answers each form of input, when `model` names none
TASK_OF_FORM = {TaskForm.TEXT: classification.TASK.name, TaskForm.PAIR: entailment.TASK.name}
MIN_LOG_PROBABILITY = math.log(5e-324)  # a probability that underflowed to 0: the least float's log


class Parameters(BaseModel):
    """huggingface_hub's InferenceClient sends its arguments here."""

    model_config = ConfigDict(extra="ignore")
    function_to_apply: Literal["softmax", "none"] | None = None
    top_k: int | None = Field(None, ge=1)


INPUT_FORMS = "a text, a pair [a, b], or a list of texts or of pairs"


def _check_text(where: str, value: Any) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{where} is {json_type(value)}; a text is a string")
    try:
        valid_text(value)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def check_inputs(value: Any) -> None:
    """ValueError, in words a caller reads, unless `value` is one of TEI's input forms."""
    if isinstance(value, str):
        _check_text("inputs", value)
        return
    if not isinstance(value, list):
        raise ValueError(f"got {json_type(value)}; send {INPUT_FORMS}")
    if not value:
        raise ValueError("send at least one input")
    pairs = isinstance(value[0], list)
    for i, item in enumerate(value):
        if isinstance(item, list) != pairs:
            raise ValueError(f"inputs[{i}] is {json_type(item)} and inputs[0] {json_type(value[0])}; "
                             "a list holds texts or pairs, not both")
        if not pairs:
            _check_text(f"inputs[{i}]", item)
            continue
        if len(item) != 2:
            raise ValueError(f"inputs[{i}] has {len(item)} texts; a pair is [a, b]")
        for j, text in enumerate(item):
            _check_text(f"inputs[{i}][{j}]", text)


class PredictRequest(RequestBody):
    endpoint_fields = ("inputs", "raw_scores", "truncate", "truncation_direction", "model", "parameters")
    explain: ClassVar[bool] = False
    inputs: Text | list[Text] | list[list[Text]] = Field(
        description="a text, a pair [a, b], or a list of texts or of pairs (a list of exactly two texts is a pair)")
    raw_scores: StrictBool = Field(False, description="true: logits less each input's log-sum-exp (log-softmax); "
                                   "false: probabilities")
    truncate: StrictBool = Field(False, description="cut each text to the model's max length; false (TEI's "
                                 "default): a 422 for a text longer than it")
    truncation_direction: Literal["Right"] = Field("Right", description="which end is cut (only the right end)")
    model: ModelName = None
    parameters: Parameters | None = None

    @field_validator("inputs", mode="wrap")
    @classmethod
    def _inputs(cls, value: Any, handler: Any) -> Any:
        # checked here, in the shapes a caller sends, before pydantic tries the union's three
        # members (whose errors, all three, named its internals)
        check_inputs(value)
        return handler(value)

    def ignored_fields(self) -> list[str]:
        return list(self._ignored)  # the inputs are texts, with no fields of their own

    def texts(self) -> tuple[list[tuple[str, ...]], bool]:
        """Each input as its texts (one, or a pair), and whether this is a batch (TEI's parse)."""
        value = self.inputs
        if isinstance(value, str):
            return [(value,)], False
        if isinstance(value[0], list):
            return [tuple(pair) for pair in value], True
        if len(value) == 2:
            return [tuple(value)], False
        return [(text,) for text in value], True


register_body(ENDPOINT, EndpointBody('{"inputs": "a text"} or {"inputs": ["a premise", "a hypothesis"]} or '
                                     '{"inputs": ["text", ...]}', ("inputs",), PredictRequest.endpoint_fields,
                                     batch=False))


class TeiError(BaseModel):
    """Text Embeddings Inference's error body (service.http.errors.error_response)."""

    error: str = Field(description="what was wrong, and what to send instead")
    error_type: Literal["validation", "overloaded", "unhealthy", "backend"]
    code: str = Field(description="the service's stable code (docs/errors.md)")


class Score(BaseModel):
    label: str
    score: float


def task_for(service: Service, model: str | None, form: TaskForm) -> str:
    """The task a request of this form runs: the named model's, when that task takes this form
    and answers labels; else the form's default task (resolve then says what is wrong)."""
    entry = service.models.get(model) if model is not None else None
    task = TASKS.get(entry.task) if entry is not None and entry.task else None
    if task is not None and task.labelled and task.form == form and task.per_text is None:
        return task.name
    return TASK_OF_FORM[form]


def scores(result: dict, raw: bool, temperature: float, top_k: int | None) -> list[dict]:
    """One input's labels and scores, best first (ties: the model's label order)."""
    pairs = list(result["scores"].items())
    if raw:
        pairs = [(label, temperature * (math.log(p) if p > 0 else MIN_LOG_PROBABILITY)) for label, p in pairs]
    order = sorted(range(len(pairs)), key=lambda i: -pairs[i][1])[:top_k]
    return [{"label": pairs[i][0], "score": pairs[i][1]} for i in order]


router = APIRouter()


@router.post(ENDPOINT, response_model=list[Score] | list[list[Score]], tags=["inference"], name="predict",
             responses={code: {"model": TeiError} for code in (404, 413, 415, 422, 429, 503, 504)})
async def predict(body: PredictRequest, request: Request) -> Response:
    """Text Embeddings Inference's classification route: a text (a classifier answers), a pair
    (an entailment model answers), or a list of either; labels and scores, best first."""
    service = service_of(request)
    state = request.scope.setdefault("state", {})
    texts, batch = body.texts()
    form = TaskForm.PAIR if len(texts[0]) == 2 else TaskForm.TEXT
    entry = admit_request(service, state, body.model, task_for(service, body.model, form), None)
    fields = TASKS[entry.task].field_names
    inputs = [SimpleNamespace(**dict(zip(fields, t))) for t in texts]
    ran = await run_request(service, state, request.receive, entry, inputs, LABEL, batch=batch)
    if not body.truncate:
        refuse_truncated(ran.results, batch)
    parameters = body.parameters or Parameters()
    raw = body.raw_scores or parameters.function_to_apply == "none"
    temperature = ran.entry.config.temperature
    answers = [scores(r, raw, temperature, parameters.top_k) for r in ran.results]
    headers = ran_headers(ran)
    ignored = body.ignored_fields()
    if ignored:
        headers[IGNORED_FIELDS_HEADER] = ignored_header(ignored)
    # a body with `parameters` is the Hugging Face Inference API's task payload (InferenceClient
    # sends it), whose answer to one text is a list of one ranking, as for a batch
    nested = batch or body.parameters is not None
    return Response(ANSWER_JSON.dump_json(answers if nested else answers[0]), media_type="application/json",
                    headers=headers)
