"""Zero-shot classification over an entailment model: `POST /zero-shot`.

A text and 1-32 candidate labels, or several under `inputs` (answered `results`, in input
order, as every endpoint's batch form); each label becomes a hypothesis through a template ("This
example is {}." by default), and the pairs (premise = the text) of every input run as ONE batched
call of a served entailment model, the same call `/entailment` makes with `{"inputs": [...]}` of those
pairs (the entailment task's default model unless `model` names one). The scores are a
function of the /entailment answers alone (tests/service/test_zero_shot.py checks it):

- single-label (`multi_label: false`): the softmax over the labels of each pair's entailment
  log-probability, i.e. P(entailment | text, hypothesis_i) / sum_j P(entailment | text,
  hypothesis_j). Hugging Face's pipeline softmaxes the raw entailment logits instead; those
  differ per pair by the pair's log-partition, which the service does not expose, and the
  /entailment scores carry the card's temperature: the two rankings usually agree, the numbers
  do not.
- multi-label: each label on its own, entailment against contradiction,
  P(entailment) / (P(entailment) + P(contradiction)). A model with no contradiction label
  (scitail-attconv: entails / neutral) has two outcomes, so its P(entailment) is already
  entailment against everything else: that is the score.

Why an endpoint of its own and not a `candidate_labels` form of /classify: /classify's `model`
names a trained classifier and its answer's labels are the bundle's; here `model` names an
entailment model and the labels are the request's, so the two would share a path but no
model, no validation and no answer shape (docs/zero-shot.md).

Zero-shot is no task of core.tasks: it has no graph of its own, it runs the entailment task's
models. It shares that task's limits (the pairs count against ATTSERVE_MAX_INPUTS_PER_REQUEST
and the request's character budget, as the same pairs sent to /entailment would), its errors
and its metrics (`endpoint="zero_shot"`, the model that ran). There is no Open Inference
Protocol form: /v2 addresses one model's tensors, and zero-shot is a composition over a model
(N pairs in, a ranking out), not a model; a /v2 client sends the N pairs to the entailment
model and normalizes as above.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Annotated, ClassVar, Union

from fastapi import APIRouter, Request, Response
from pydantic import AfterValidator, BaseModel, Discriminator, Field, StrictBool, Tag

from core.tasks import entailment
from service.http.errors import EndpointBody, generic_input, register_body
from service.inference.errors import InvalidInput, TooManyInputs, WrongTask, excerpt
from service.http.routes import (ANSWER_JSON, IGNORED_FIELDS_HEADER, admit_request, ignored_header, ran_headers,
                                 run_request, service_of)
from service.http.schemas import ErrorBody, ModelName, Text, Truncate, RequestBody, body_form

ENDPOINT = "/zero-shot"
LABEL = "zero_shot"  # the `endpoint` metric label
TASK = entailment.TASK.name  # the task whose models answer: a declared dependency on its module
# the pair's two texts, in the entailment task's order: the text, then each label's hypothesis
PREMISE, HYPOTHESIS = entailment.TASK.field_names
MAX_CANDIDATE_LABELS = 32
DEFAULT_TEMPLATE = "This example is {}."
PLACEHOLDER = "{}"
# the label names that mean "the hypothesis follows" (the entailment task's own list) / "the
# hypothesis is false", as bundles spell them
ENTAILMENT_LABELS = entailment.ENTAILING_LABELS
CONTRADICTION_LABELS = ("contradiction", "contradicts", "contradicted")


def _valid_template(template: str) -> str:
    if template.count(PLACEHOLDER) != 1:
        raise ValueError(f"must hold \"{{}}\" exactly once, where each candidate label goes (got "
                         f"{excerpt(template)}); e.g. {DEFAULT_TEMPLATE!r}")
    return template


def _distinct(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):
        if label in seen:
            raise ValueError(f"candidate_labels[{i}] repeats candidate_labels[{seen[label]}] ({excerpt(label)}); "
                             "send each label once")
        seen[label] = i
    return labels


Template = Annotated[str, AfterValidator(_valid_template)]


class ZeroShotInput(RequestBody):
    """One text and its candidate labels (Hugging Face's zero-shot-classification arguments)."""

    endpoint_fields = ("text", "candidate_labels", "hypothesis_template", "multi_label", "inputs", "model", "truncate")
    explain: ClassVar[bool] = False  # the explanation of N pairs has no single heat map: ask /entailment
    text: Text = Field(description="the text to label (the premise of every pair)")
    candidate_labels: Annotated[list[Text], AfterValidator(_distinct)] = Field(
        min_length=1, max_length=MAX_CANDIDATE_LABELS,
        description=f"1-{MAX_CANDIDATE_LABELS} labels, each put into hypothesis_template")
    hypothesis_template: Template = Field(DEFAULT_TEMPLATE, description="the hypothesis of each label: \"{}\" is "
                                          "replaced by the label")
    multi_label: StrictBool = Field(False, description="false: the scores are a distribution over the labels (one fits); "
                              "true: each label is scored on its own, entailment against contradiction")


class ZeroShotRequest(ZeroShotInput):
    """One input: a text and its candidate labels, with the request's `model` and `truncate`."""

    model: ModelName = None
    truncate: Truncate = True


class ZeroShotBatchRequest(RequestBody):
    """Several inputs, answered `{"results": [...]}` in input order; their pairs run as one
    batched call and count together against the request's limits."""

    endpoint_fields = ZeroShotInput.endpoint_fields
    explain: ClassVar[bool] = False
    inputs: list[ZeroShotInput] = Field(min_length=1)
    model: ModelName = None
    truncate: Truncate = True


# one input or a batch, told apart by `inputs`, as the task endpoints' bodies (service.http.schemas)
ZeroShotBody = Annotated[Union[Annotated[ZeroShotRequest, Tag("single")], Annotated[ZeroShotBatchRequest, Tag("batch")]],
                         Discriminator(body_form)]
# one input: the text and its labels (the template and multi_label have defaults)
INPUT_FIELDS = ("text", "candidate_labels", "hypothesis_template", "multi_label")
_ONE = generic_input([("text", False), ("candidate_labels", True)])
register_body(ENDPOINT, EndpointBody(f'{_ONE} or {{"inputs": [{_ONE}, ...]}}', INPUT_FIELDS,
                                     ZeroShotInput.endpoint_fields, batch=True))
# the explanation page's example (service.http.ui)
EXAMPLE = {"text": "Shares in the bank fell sharply after it reported a loss for the quarter.",
           "candidate_labels": ["business", "sport", "politics", "technology"],
           "hypothesis_template": DEFAULT_TEMPLATE}


class ZeroShotAnswer(BaseModel):
    sequence: str = Field(description="the text, as sent")
    labels: list[str] = Field(description="the candidate labels, best first (ties: request order)")
    scores: list[float] = Field(description="each label's score, in the order of `labels`")
    multi_label: bool
    model: str
    truncated: bool = Field(description="true when the text or a hypothesis was cut to the model's max length")
    unknown_token_share: float = Field(ge=0, le=1, description="the largest unknown-token share of the pairs "
                                       "(docs/answers.md)")


def hypothesis(template: str, label: str) -> str:
    # str.replace, not str.format: a template may hold other braces
    return template.replace(PLACEHOLDER, label, 1)


def label_roles(labels: list[str], model: str) -> tuple[str, str | None]:
    """The model's entailment label and its contradiction label (None when it has none);
    wrong_task for a model none of whose labels means entailment."""
    lowered = {label.lower(): label for label in labels}
    entail = next((lowered[name] for name in ENTAILMENT_LABELS if name in lowered), None)
    if entail is None:
        raise WrongTask(f"model {model!r} has no entailment label (its labels: {labels}; zero-shot needs one of "
                        f"{list(ENTAILMENT_LABELS)}); name another entailment model (/v1/models)")
    contra = next((lowered[name] for name in CONTRADICTION_LABELS if name in lowered), None)
    return entail, contra


def zero_shot_scores(pair_answers: list[dict], multi_label: bool, entail: str, contra: str | None) -> list[float]:
    """Each candidate's score from the /entailment answers of its pair (`scores` by label)."""
    p_entail = [answer["scores"][entail] for answer in pair_answers]
    if multi_label:
        if contra is None:
            return p_entail
        out = []
        for answer, p in zip(pair_answers, p_entail):
            both = p + answer["scores"][contra]
            out.append(p / both if both > 0 else 0.5)
        return out
    total = sum(p_entail)
    if total <= 0:  # every entailment probability underflowed: no label is preferred
        return [1.0 / len(p_entail)] * len(p_entail)
    return [p / total for p in p_entail]


def zero_shot_answer(one: ZeroShotInput, pair_answers: list[dict], model_labels: list[str], model: str) -> dict:
    """One input's answer from its pairs' /entailment answers, labels best first (ties: request order)."""
    entail, contra = label_roles(model_labels, model)
    scores = zero_shot_scores(pair_answers, one.multi_label, entail, contra)
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return {"sequence": one.text, "labels": [one.candidate_labels[i] for i in order],
            "scores": [scores[i] for i in order], "multi_label": one.multi_label, "model": model,
            "truncated": any(a["truncated"] for a in pair_answers),
            "unknown_token_share": max(a["unknown_token_share"] for a in pair_answers)}


class ZeroShotBatchAnswer(BaseModel):
    results: list[ZeroShotAnswer]


def pair_owners(inputs: list[ZeroShotInput]) -> list[tuple[int, int]]:
    """(input, label) of each pair, in the order the pairs run: every label of input 0, then of input 1, ..."""
    return [(i, j) for i, one in enumerate(inputs) for j in range(len(one.candidate_labels))]


_INPUT_FIELD = re.compile(rf"inputs\[(\d+)\]\.({re.escape(PREMISE)}|{re.escape(HYPOTHESIS)})")
_PAIR_COUNT = re.compile(r"^(\d+) inputs;")


def _where(owner: tuple[int, int], batch: bool, field: str) -> str:
    """A pair's text in this request's fields: "text", "candidate_labels[3] (its hypothesis)",
    with "inputs[i]." in front in the batch form."""
    i, j = owner
    named = "text" if field == PREMISE else f"candidate_labels[{j}] (its hypothesis)"
    return f"inputs[{i}].{named}" if batch else named


def _in_request_terms(message: str, owners: list[tuple[int, int]], batch: bool) -> str:
    """An engine error names the pairs as /entailment would ("inputs[3].hypothesis", "40
    inputs"): say it in this request's fields."""
    message = _PAIR_COUNT.sub(r"\1 text-label pairs (each candidate label of each text is one input);", message)
    return _INPUT_FIELD.sub(lambda m: _where(owners[int(m.group(1))], batch, m.group(2)), message)


router = APIRouter()


@router.post(ENDPOINT, response_model=Union[ZeroShotAnswer, ZeroShotBatchAnswer], tags=["inference"], name="zero_shot",
             responses={code: {"model": ErrorBody} for code in (404, 413, 415, 422, 429, 503, 504)})
async def zero_shot(body: ZeroShotBody, request: Request) -> Response:
    """Which of these labels fits the text? Each label is tried as an entailment hypothesis
    (one batched call of an entailment model, for every input of a batch together); the labels
    come back best first. One input, or several under `inputs` (answered `results`, in order)."""
    service = service_of(request)
    state = request.scope.setdefault("state", {})
    entry = admit_request(service, state, body.model, TASK)
    label_roles(entry.config.labels, entry.name)  # before any work: a model that cannot answer
    batch = isinstance(body, ZeroShotBatchRequest)
    inputs = body.inputs if batch else [body]
    owners = pair_owners(inputs)
    pairs = [SimpleNamespace(**{PREMISE: inputs[i].text,
                                HYPOTHESIS: hypothesis(inputs[i].hypothesis_template, inputs[i].candidate_labels[j])})
             for i, j in owners]
    try:
        ran = await run_request(service, state, request.receive, entry, pairs, LABEL, batch=True)
    except (InvalidInput, TooManyInputs) as exc:
        raise type(exc)(_in_request_terms(exc.message, owners, batch), headers=exc.headers) from None
    results, headers = ran.results, ran_headers(ran)
    if not body.truncate:
        cut = next((owners[k] for k, r in enumerate(results) if r["truncated"]), None)
        if cut is not None:
            where = f"inputs[{cut[0]}]." if batch else ""
            raise InvalidInput(f"{where}candidate_labels[{cut[1]}]: the text or its hypothesis is longer than the "
                               "model's max length (its max_lengths in /v1/models); send \"truncate\": true to cut it, "
                               "or a shorter text")
    ignored = body.ignored_fields()
    if ignored:
        headers[IGNORED_FIELDS_HEADER] = ignored_header(ignored)
    answers, k = [], 0
    for one in inputs:
        n = len(one.candidate_labels)
        answers.append(zero_shot_answer(one, results[k:k + n], ran.entry.config.labels, ran.entry.name))
        k += n
    document = {"results": answers} if batch else answers[0]
    return Response(ANSWER_JSON.dump_json(document), media_type="application/json", headers=headers)
