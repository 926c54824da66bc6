"""The request and answer schemas of a labelled task are made from its registry entry
(service.http.schemas.labelled_schemas): every registered task gets its texts, `model` and
`explain`; a task made up here, not registered, gets working schemas with no code in
service/http/schemas.py; rerank keeps TEI's hand-written contract."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import TypeAdapter, ValidationError

from core.tasks import TASKS, Task, TextField
from service.http import schemas

LABELLED = [task for task in TASKS.values() if task.labelled]

# a made-up task: two texts and a list of texts with one score each
QUOTE = Task("attribution", "/attribute", "attribute", "Who said the quote, given passages?",
             (TextField("quote", "quote_ids"), TextField("speaker", "speaker_ids", description="who is said to say it"),
              TextField("passages", "passages_ids", many=True, description="passages that may hold the quote")),
             per_text="passage_scores", per_text_description="how much each passage counts")


def forms(body: object) -> tuple[type, type]:
    """The single and batch request classes of a body, `Annotated[Union[single, batch], Discriminator]`."""
    single, batch = (get_args(member)[0] for member in get_args(get_args(body)[0]))
    return single, batch


@pytest.mark.parametrize("task", LABELLED, ids=lambda t: t.name)
def test_a_registered_labelled_task_takes_its_texts_model_and_explain(task):
    single, batch = forms(schemas.TASK_SCHEMAS[task.name].body)
    prefix = task.label.capitalize()
    assert (single.__name__, batch.__name__) == (f"{prefix}Request", f"{prefix}BatchRequest")
    assert tuple(single.model_fields) == (*task.field_names, "model", "version", "explain", "truncate")
    assert tuple(batch.model_fields) == ("inputs", "model", "version", "explain", "truncate")
    one = {f.name: ["a text"] if f.many else "a text" for f in task.fields}
    body = TypeAdapter(schemas.TASK_SCHEMAS[task.name].body)
    assert type(body.validate_python(one)) is single
    assert type(body.validate_python({"inputs": [one]})) is batch
    properties = single.model_json_schema()["properties"]
    for f in task.fields:
        if f.many:
            assert properties[f.name]["type"] == "array" and properties[f.name]["items"] == {"type": "string"}
            assert properties[f.name]["minItems"] == 1
        else:
            assert properties[f.name]["type"] == "string"
        assert properties[f.name].get("description", "") == f.description
    assert batch.model_json_schema()["properties"]["inputs"]["minItems"] == 1
    assert set(single.endpoint_fields) == set(batch.endpoint_fields) == {*task.field_names, "inputs", "model",
                                                                          "version", "explain", "truncate"}


@pytest.mark.parametrize("task", LABELLED, ids=lambda t: t.name)
def test_a_labelled_task_answers_its_per_text_scores(task):
    answer = schemas.TASK_SCHEMAS[task.name]
    if task.per_text is None:
        assert (answer.answer, answer.batch_answer) == (schemas.Prediction, schemas.BatchPredictions)
        assert answer.has_batch_form
        return
    assert issubclass(answer.answer, schemas.Prediction)
    assert answer.answer.model_fields[task.per_text].annotation == list[float]
    assert answer.batch_answer.model_fields["results"].annotation == list[answer.answer]


def test_a_new_labelled_task_needs_no_schema_code():
    made = schemas.labelled_schemas(QUOTE)
    body = TypeAdapter(made.body)
    one = {"quote": "To be or not to be", "speaker": "Hamlet", "passages": ["Act III", "Scene I"]}

    single = body.validate_python({**one, "explain": True})
    assert type(single).__name__ == "AttributeRequest"
    assert (single.passages, single.explain, single.model) == (["Act III", "Scene I"], True, None)
    batch = body.validate_python({"inputs": [one, one], "model": "m"})
    assert type(batch).__name__ == "AttributeBatchRequest"
    assert [type(x).__name__ for x in batch.inputs] == ["AttributeInput"] * 2
    assert batch.model == "m" and batch.ignored_fields() == []

    with pytest.raises(ValidationError, match="passages"):
        body.validate_python({**one, "passages": []})
    with pytest.raises(ValidationError, match="whitespace-only"):
        body.validate_python({**one, "speaker": " \n"})
    with pytest.raises(ValidationError, match="inputs"):
        body.validate_python({"inputs": []})

    # unknown fields are dropped and reported; a near miss of a field stays an error
    with_metadata = body.validate_python({"inputs": [{**one, "source": "web"}], "request_id": "7"})
    assert with_metadata.ignored_fields() == ["request_id", "inputs[0].source"]
    with pytest.raises(ValidationError, match="speakr"):
        body.validate_python({**one, "speakr": "Hamlet"})
    with pytest.raises(ValidationError, match="model"):  # a field of the request, inside an input
        body.validate_python({"inputs": [{**one, "model": "m"}]})

    assert made.answer.__name__ == "AttributePrediction"
    answer = made.answer.model_json_schema()["properties"]["passage_scores"]
    assert answer["items"] == {"type": "number"} and answer["description"] == "how much each passage counts"
    assert made.batch_answer.__name__ == "AttributeBatchPredictions"
    assert "passage_scores" in made.batch_answer.model_json_schema()["$defs"]["AttributePrediction"]["required"]


def test_a_task_field_may_not_take_a_request_or_answer_name():
    with pytest.raises(ValueError, match="model"):
        schemas.labelled_schemas(Task("x", "/x", "x", "x", (TextField("model", "model_ids"),)))
    with pytest.raises(ValueError, match="scores"):
        schemas.labelled_schemas(Task("x", "/x", "x", "x", (TextField("t", "t_ids"), TextField("u", "u_ids", many=True)),
                                      per_text="scores"))


def test_rerank_keeps_the_tei_contract():
    """rerank's TEI contract is its module's (core/tasks/rerank.py: REQUEST_OPTIONS, ANSWER,
    answer_of); the service builds the request from it with its own unknown-field handling."""
    from core.tasks import rerank as module

    rerank = schemas.TASK_SCHEMAS["rerank"]
    assert rerank is schemas.EXTERNAL_CONTRACTS["rerank"] and set(schemas.EXTERNAL_CONTRACTS) == {"rerank"}
    assert rerank.body.__name__ == "RerankRequest" and rerank.answer == module.ANSWER == list[module.Rank]
    assert rerank.answer_of is module.answer_of and rerank.batch_answer is None and not rerank.has_batch_form
    assert tuple(rerank.body.model_fields) == ("query", "texts", "raw_scores", "return_text", "truncation_direction",
                                               "truncate", "model", "version")
    assert rerank.body.endpoint_fields == rerank.fields == tuple(rerank.body.model_fields)
    assert rerank.body.explain is False  # no attention for reranking: a class attribute, no field
    body = rerank.body.model_validate({"query": "q", "texts": ["a", "b"], "top_n": 2})
    assert (body.truncate, body.raw_scores, body.return_text, body.ignored_fields()) == (True, False, False, ["top_n"])
    for wrong in ({"query": "q", "texts": []}, {"query": "q", "texts": ["a"], "raw_scores": 1},
                  {"query": "q", "texts": ["a"], "truncation_direction": "Left"}, {"query": " ", "texts": ["a"]},
                  {"query": "q", "texts": ["a"], "raw_score": True}):  # a near miss stays an error
        with pytest.raises(ValidationError):
            rerank.body.model_validate(wrong)
    assert module.answer_of(body, [{"scores": [-1.0, 2.0]}]) == [
        {"index": 1, "score": pytest.approx(0.8807970779)}, {"index": 0, "score": pytest.approx(0.2689414214)}]
    with pytest.raises(ValueError, match="REQUEST_OPTIONS"):
        schemas.labelled_schemas(TASKS["rerank"])


def test_a_module_contract_needs_no_schema_code():
    """A made-up task whose module declares a contract gets its request and answer from it."""
    from types import SimpleNamespace

    from pydantic import BaseModel

    class Options(BaseModel):
        top: int = 3

    task = Task("lookup", "/lookup", "lookup", "Look a query up.", (TextField("query", "query_ids"),),
                per_text=None, labelled=False)
    module = SimpleNamespace(REQUEST_OPTIONS=Options, ANSWER=list[int], answer_of=lambda body, results: [body.top])
    made = schemas.contract_schemas(task, module)
    assert made.body.__name__ == "LookupRequest" and made.fields == ("query", "top", "truncate", "model", "version")
    assert made.answer_of(made.body.model_validate({"query": "q", "top": 5}), [{}]) == [5]
    clashing = SimpleNamespace(REQUEST_OPTIONS=type("O", (BaseModel,), {"__annotations__": {"model": str}}),
                               ANSWER=list[int], answer_of=None)
    with pytest.raises(ValueError, match="model"):
        schemas.contract_schemas(task, clashing)
