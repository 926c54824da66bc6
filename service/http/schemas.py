"""Request and response bodies of the HTTP API (pydantic; they are also the OpenAPI schema).

Each inference endpoint takes a single input (`{"premise", "hypothesis", "model"?}`) or a
batch (`{"inputs": [...], "model"?}`). The form is picked by the presence of `inputs`, so a
validation error speaks only about the form the client meant. A labelled task's schemas are
made from its entry in the task registry (core.tasks, `labelled_schemas`); a task that follows
an outside API (rerank: TEI's) declares its contract in its own module (`contract_schemas`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Annotated, Any, Callable, ClassVar, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, StrictBool, Tag,
                      create_model, model_validator)

import core.tasks
from core.tasks import TASKS, Task
from service.http.errors import EndpointBody, close_field, register_body


def valid_text(text: str) -> str:
    if not text.strip():
        raise ValueError("text must not be empty or whitespace-only")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # a JSON escape like "\ud800" decodes to a lone surrogate, which is no character and
        # which the tokenizer cannot take
        raise ValueError("text contains a lone UTF-16 surrogate (\\ud800-\\udfff)") from None
    return text


Text = Annotated[str, AfterValidator(valid_text)]
# booleans are JSON true/false only: pydantic would take 0, 1.0 or "yes", which the schema says
# are no booleans (the fuzz test's negative-data check)
Truncate = Annotated[StrictBool, Field(description="cut each text to the model's max length (the answer says "
                                 "\"truncated\": true); false: a 422 for a text longer than it")]
ModelVersion = Annotated[str | None, Field(description="the version of `model` to run (/v1/models lists them); "
                                           "its newest ready version when omitted")]
ModelName = Annotated[str | None, Field(description="bundle name; the task's default model when omitted")]
Explain = Annotated[StrictBool, Field(description="also return the tokens as the model saw them and the attention it "
                                "used (alignment between the texts, evidence shares, or token weights)")]


def _open_schema(schema: dict[str, Any]) -> None:
    schema.pop("additionalProperties", None)  # unknown fields are accepted (and ignored): see RequestBody


# Unknown fields one object (the body, or one input) may carry: more is a 422 at once. Each
# unknown field costs a lookup and, when it could be a near miss, a did-you-mean: bounded here,
# the work a body costs stays linear in its size and small.
MAX_UNKNOWN_FIELDS = 16


class RequestBody(BaseModel):
    """A request body or one of its inputs. Unknown fields are ignored (clients add metadata:
    "lang", "id", "request_id"), and listed in the answer's X-Attserve-Ignored-Fields header,
    except one that is a near miss of a field of the endpoint ("modle", "Text"), or a field of
    the other form or place (a "text" beside "inputs", a "model" inside an input): those stay
    422, since ignoring them would change the answer without a word (docs/errors.md). An object
    with more than MAX_UNKNOWN_FIELDS unknown fields is a 422."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), json_schema_extra=_open_schema)
    # every field name the endpoint takes anywhere (set per task below)
    endpoint_fields: ClassVar[tuple[str, ...]] = ()
    _ignored: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _ignore_unknown(cls, data: Any, handler: Any) -> Any:
        ignored: list[str] = []
        if isinstance(data, dict):
            known = cls.model_fields  # a dict: one hashed lookup a key
            unknown = [k for k in data if k not in known]
            if len(unknown) > MAX_UNKNOWN_FIELDS:
                raise ValueError(f"{len(unknown)} unknown fields; at most {MAX_UNKNOWN_FIELDS} per object are "
                                 f"ignored (fields this endpoint takes: {', '.join(cls.endpoint_fields)})")
            ignored = [k for k in unknown if close_field(k, cls.endpoint_fields) is None]
            if ignored:
                dropped = set(ignored)
                data = {k: v for k, v in data.items() if k not in dropped}
        instance = handler(data)
        if ignored:
            instance._ignored = ignored
        return instance

    def ignored_fields(self) -> list[str]:
        """The unknown fields dropped from this body, as JSON paths (inputs[2].source)."""
        out = list(self._ignored)
        for i, x in enumerate(self.__dict__.get("inputs") or ()):  # no AttributeError for a single body
            out += [f"inputs[{i}].{name}" for name in x._ignored]
        return out


def body_form(value: Any) -> str:
    if isinstance(value, dict):
        return "batch" if "inputs" in value else "single"
    return "batch" if hasattr(value, "inputs") else "single"


# --- answers --------------------------------------------------------------------------------

class Token(BaseModel):
    token: str = Field(description="the token as the model saw it (normalized; an unknown word: its normalized text)")
    start: int = Field(description="offset of its first character in the text sent, in Unicode code points")
    end: int = Field(description="offset just past its last character, in Unicode code points")
    unknown: bool = Field(description="outside the model's vocabulary")


class Alignment(BaseModel):
    rows: str = Field(description="the text whose tokens are the rows (hypothesis, claim or text)")
    columns: str = Field(description="the text whose tokens are the columns (premise, evidence or text)")
    weights: list[list[float]] = Field(description="one row per row token, one column per column token (the "
                                       "tokens listed); each row sums to 1")


class EvidenceExplanation(BaseModel):
    share: float = Field(description="this evidence's weight, as evidence_scores")
    alignment: Alignment


class Explanation(BaseModel):
    method: str | None = Field(description="what the weights are; null: the model exposes no attention")
    tokens: dict[str, list[Token] | list[list[Token]]] = Field(
        description="per text field, the tokens the model read, up to its max length (evidence: one list per "
                    "sentence); the tokens past it are counted in cut_tokens, not described")
    cut_tokens: dict[str, int | list[int]] = Field(
        description="per text field, how many tokens past the model's max length were cut (the model never saw "
                    "them; evidence: one count per sentence)")
    alignment: Alignment | None = Field(None, description="pair models and AttConv classifiers")
    token_weights: list[float] | None = Field(None, description="ACT classifiers: one weight per token listed")
    evidence: list[EvidenceExplanation] | None = Field(None, description="verification: one entry per evidence")


class Prediction(BaseModel):
    label: str
    scores: dict[str, float] = Field(description="probability of each label, summing to 1")
    model: str
    truncated: bool = Field(description="true when a text of this input was cut to the model's max length")
    unknown_token_share: float = Field(
        ge=0, le=1, description="share of this input's tokens (those the model read, every text together) that are "
        "outside the model's vocabulary ([UNK] or a hashed out-of-vocabulary bucket), to 4 decimals: a high share "
        "flags text unlike the model's training data, whatever the scores say (docs/answers.md)")
    explanation: Explanation | None = Field(None, description="only when the request asked for it (explain: true)")


class BatchPredictions(BaseModel):
    results: list[Prediction]


@dataclass(frozen=True)
class TaskSchemas:
    """A task's request body (one input or a batch, told apart by `inputs`) and its answer
    schemas. `answer_of(body, results)`, when set, shapes a request's answer from the engine's
    results (one dict per input) for a task whose answer is not a result or `{"results": [...]}`;
    `batch_answer` is None for a task without a batch form."""

    body: Any
    answer: Any
    batch_answer: type[BaseModel] | None = None
    answer_of: Callable[[Any, list[dict]], Any] | None = None
    fields: tuple[str, ...] = ()  # every field the body takes anywhere (its error messages')

    @property
    def has_batch_form(self) -> bool:
        return self.batch_answer is not None


# --- labelled tasks: generated from the registry -------------------------------------------------

_REQUEST_FIELDS = ("inputs", "model", "version", "explain", "truncate")


def _described(description: str) -> dict[str, str]:
    # no `description` key at all for an empty one, as a field written without it
    return {"description": description} if description else {}


def _text_fields(task: Task) -> dict[str, Any]:
    """The request fields of a task's texts: a text, or a list of at least one text."""
    return {f.name: (list[Text], Field(min_length=1, **_described(f.description))) if f.many
            else (Text, Field(**_described(f.description)))
            for f in task.fields}


def labelled_schemas(task: Task) -> TaskSchemas:
    """The schemas of a labelled task, made from its registry entry, so that a new task needs
    no code here. With the prefix `task.label.capitalize()` ("Verify"):
    `<Prefix>Input` (the task's texts), `<Prefix>Request` (one input, `model`, `explain`),
    `<Prefix>BatchRequest` (`inputs`, `model`, `explain`), and for a task with a per-text
    output `<Prefix>Prediction` / `<Prefix>BatchPredictions` (else the shared `Prediction` /
    `BatchPredictions`). The class names are the OpenAPI component names."""
    if not task.labelled:
        raise ValueError(f"task {task.name}: not labelled; its module declares its contract (REQUEST_OPTIONS, "
                         "ANSWER, answer_of: contract_schemas)")
    clash = set(task.field_names) & set(_REQUEST_FIELDS)
    if clash or task.per_text in Prediction.model_fields:
        # a text named "model" would shadow the request's, a per-text "scores" the label scores
        raise ValueError(f"task {task.name}: field {sorted(clash) or [task.per_text]} is taken by the request "
                         "or the answer")
    prefix = task.label.capitalize()
    texts = _text_fields(task)
    endpoint_fields = (*task.field_names, *_REQUEST_FIELDS)
    # `endpoint_fields` is set on the classes made, not passed to create_model: it is a ClassVar
    # of RequestBody, not a field
    one = create_model(f"{prefix}Input", __base__=RequestBody, __module__=__name__, **texts)
    one.endpoint_fields = endpoint_fields
    single = create_model(f"{prefix}Request", __base__=one, __module__=__name__,
                          model=(ModelName, None), version=(ModelVersion, None), explain=(Explain, False),
                          truncate=(Truncate, True))
    batch = create_model(f"{prefix}BatchRequest", __base__=RequestBody, __module__=__name__,
                         inputs=(list[one], Field(min_length=1)), model=(ModelName, None),
                         version=(ModelVersion, None), explain=(Explain, False), truncate=(Truncate, True))
    batch.endpoint_fields = endpoint_fields
    body = Annotated[Union[Annotated[single, Tag("single")], Annotated[batch, Tag("batch")]], Discriminator(body_form)]
    if task.per_text is None:
        return TaskSchemas(body, Prediction, BatchPredictions, fields=endpoint_fields)
    prediction = create_model(f"{prefix}Prediction", __base__=Prediction, __module__=__name__,
                              **{task.per_text: (list[float], Field(**_described(task.per_text_description)))})
    predictions = create_model(f"{prefix}BatchPredictions", __module__=__name__, results=(list[prediction], ...))
    return TaskSchemas(body, prediction, predictions, fields=endpoint_fields)


# --- tasks that follow an outside API: their contract is their module's ----------------------------

def contract_of(task: Task) -> ModuleType | None:
    """The module of `task` (core/tasks/<name>.py) when it declares an outside API's contract
    (its `ANSWER` and `answer_of`, and `REQUEST_OPTIONS`), else None."""
    module = importlib.import_module(f"{core.tasks.__name__}.{task.name}")
    return module if hasattr(module, "ANSWER") else None


def contract_schemas(task: Task, module: ModuleType) -> TaskSchemas:
    """The schemas of a task whose module declares its contract (rerank: TEI's): the request,
    `<Prefix>Request`, takes the task's texts, the module's `REQUEST_OPTIONS` fields, then
    `truncate`, `model` and `version`, with the service's handling of unknown fields (RequestBody); no
    batch form, no `explain` (the routes read it as false); the answer is the module's
    `ANSWER`, shaped by its `answer_of(body, results)`."""
    options: type[BaseModel] | None = getattr(module, "REQUEST_OPTIONS", None)
    extra = {name: (info.annotation, info) for name, info in (options.model_fields if options else {}).items()}
    clash = (set(task.field_names) | set(extra)) & {"model", "version", "truncate", "explain", "inputs"}
    if clash:
        raise ValueError(f"task {task.name}: field {sorted(clash)} is taken by the request")
    texts = _text_fields(task)
    request = create_model(f"{task.label.capitalize()}Request", __base__=RequestBody, __module__=__name__,
                           __doc__=(options.__doc__ if options is not None else None) or task.summary,
                           **texts, **extra, truncate=(Truncate, True), model=(ModelName, None),
                           version=(ModelVersion, None))
    request.endpoint_fields = tuple(request.model_fields)
    request.explain = False  # a class attribute, not a field: no attention is exposed
    return TaskSchemas(request, module.ANSWER, answer_of=module.answer_of, fields=request.endpoint_fields)


def _schemas(task: Task) -> TaskSchemas:
    module = contract_of(task)
    return contract_schemas(task, module) if module is not None else labelled_schemas(task)


# task name (core.tasks) -> its schemas; the routes are made from this and the task registry
TASK_SCHEMAS: dict[str, TaskSchemas] = {name: _schemas(task) for name, task in TASKS.items()}
# the tasks whose request and answer follow an outside API's contract, declared by their module
EXTERNAL_CONTRACTS: dict[str, TaskSchemas] = {name: TASK_SCHEMAS[name] for name, task in TASKS.items()
                                              if contract_of(task) is not None}
for _name, _task in TASKS.items():
    register_body(_task.endpoint, EndpointBody.of_task(_task, TASK_SCHEMAS[_name].fields,
                                                       batch=TASK_SCHEMAS[_name].has_batch_form))


class ErrorDetail(BaseModel):
    code: str
    message: str
    endpoints: list[str] | None = Field(None, description="404 not_found only: every endpoint, as \"METHOD /path\"")
    allowed_methods: list[str] | None = Field(None, description="405 method_not_allowed only: the methods the path "
                                              "takes (as the Allow header)")


class ErrorBody(BaseModel):
    error: ErrorDetail


class VersionInfo(BaseModel):
    version: str
    state: Literal["READY", "LOADING", "UNAVAILABLE"] = Field(description="as the repository index says it "
                                                             "(Triton's states)")
    reason: str = Field("", description="why it is unavailable, or why its last reload failed while it serves on")
    default: bool = Field(False, description="the version a request naming none runs on (the rest of them, "
                          "beside a canary; never the canary while another version is ready)")
    traffic: float = Field(0.0, description="the share of the requests naming no version this version answers")


class CanaryInfo(BaseModel):
    version: str
    share: float = Field(description="its share of the requests naming no version (0: loaded, staged, no traffic)")
    rest: str | None = Field(None, description="the version that takes the rest of them (the default)")


class ModelInfo(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    name: str
    status: Literal["loading", "ready", "failed"]
    task: str | None = None
    architecture: str | None = None
    kind: str | None = Field(None, description="the bundle's kind: attserve (exported by attserve export) or "
                             "transformers (a Hugging Face classifier, attserve bundle import-hf)")
    version: str | None = Field(None, description="the version this entry describes: the one a request naming "
                                "none runs on")
    versions: list[VersionInfo] = Field(default_factory=list, description="every version of the model, oldest first")
    canary: CanaryInfo | None = Field(None, description="the version that takes a share of the requests naming no "
                                      "version (the default takes the rest); null: none")
    description: str = ""
    labels: list[str] = Field(default_factory=list)
    provider: str | None = Field(None, description="onnxruntime execution provider actually running the model")
    provider_options: dict[str, str] = Field(default_factory=dict, description="the CUDAExecutionProvider options "
                                             "in force, as onnxruntime reports them (empty on CPU)")
    max_lengths: dict[str, int] = Field(default_factory=dict)
    max_evidence: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    default: bool = Field(False, description="the model used for its task when a request names none")
    default_reason: str | None = Field(None, description="why this model is its task's default (default model only)")
    intra_op_threads: int | None = None
    length_buckets: dict[str, list[int]] = Field(default_factory=dict)
    batch_grid: list[int] | None = Field(None, description="batch sizes every graph call is padded to "
                                         "(null: calls run as many rows as items)")
    warmup: dict[str, Any] | None = Field(None, description="the warm-up: seconds, shapes run, batch_grid")
    temperature: float | None = Field(None, description="scores are softmax(logits / temperature)")
    explanation: str | None = Field(None, description="what `explain: true` returns for this model (null: tokens only)")
    card: dict[str, Any] | None = Field(None, description="model card: training data, in-domain and out-of-domain "
                                        "dev figures, unknown-token shares, calibration, known failure modes")
    error: str | None = None


class TaskInfo(BaseModel):
    endpoint: str
    models: list[str] = Field(default_factory=list, description="models of the task, failed ones included")
    default: str | None = Field(None, description="the model a request naming none runs on; "
                                "null: no model of the task is served (404 no_model_for_task)")
    default_reason: str | None = None


class ModelList(BaseModel):
    models: list[ModelInfo]
    tasks: dict[str, TaskInfo] = Field(default_factory=dict)


class LiveStatus(BaseModel):
    status: Literal["alive"] = Field(description="the process is up and answering; says nothing about the models "
                                     "(/health/ready does)")


class Health(BaseModel):
    status: str
    models: dict[str, str] = Field(default_factory=dict)
