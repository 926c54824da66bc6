"""Error messages in the service's own words: where (the JSON path), what was
wrong and what to send; pydantic's phrasing never reaches a client; a body sent without the
JSON content-type is named as such."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.bundles import running_app
from service.settings import Settings

PYDANTIC_WORDING = ("Value error", "JSON decode error", "Input should be", "Extra inputs are not permitted",
                    "Field required", "valid dictionary", "List should have")

CASES = [
    # path, raw body, content-type, status, code, words the message must hold
    ("/classify", {"inputs": [{"text": "a"}], "text": "b"}, 422, "invalid_input",
     ["text:", "either one input or a batch", '"inputs"']),
    # unknown fields are ignored (docs/errors.md), but not a near miss of a field the endpoint takes
    ("/classify", {"text": "ok", "modle": "x"}, 422, "invalid_input",
     ["modle: unknown field; did you mean 'model'?", '{"inputs": [{"text": "..."}, ...]}']),
    ("/classify", {"text": "ok", "Explain": True}, 422, "invalid_input", ["Explain: unknown field; did you mean 'explain'?"]),
    ("/entailment", {"premise": "a", "hypothesys": "b"}, 422, "invalid_input", ["did you mean 'hypothesis'?"]),
    ("/classify", {"inputs": [{"text": "a", "model": "topic"}]}, 422, "invalid_input",
     ["inputs[0].model: not expected inside an input", "top level"]),
    ("/classify", {"text": "   "}, 422, "invalid_input", ["text: text must not be empty or whitespace-only"]),
    ("/classify", {"text": 42}, 422, "invalid_input", ["text: expected a string, got a number"]),
    ("/classify", {"inputs": []}, 422, "invalid_input", ["inputs: empty list", "at least one"]),
    ("/classify", [{"text": "a"}], 422, "invalid_input", ["body: expected a JSON object, got a list", '{"text": "']),
    ("/entailment", {"premise": "a"}, 422, "invalid_input",
     ["hypothesis: required field missing", '{"inputs": [{"premise": "...", "hypothesis": "..."}, ...]}']),
    ("/entailment", {"inputs": [{"premise": "a", "hypothesis": "b"}, {"premise": "a", "hypothesis": 3}]}, 422,
     "invalid_input", ["inputs[1].hypothesis: expected a string, got a number"]),
    ("/verify", {"claim": "a", "evidence": "not a list"}, 422, "invalid_input",
     ["evidence: expected a list, got a string"]),
    ("/verify", {"claim": "a", "evidence": ["ok", 7]}, 422, "invalid_input", ["evidence[1]: expected a string"]),
    ("/classify", b'{"text": "a', 422, "invalid_input", ["body: not valid JSON", "at character"]),
    ("/classify", b"", 422, "invalid_input", ["body: empty", '{"inputs": [{"text": "..."}, ...]}']),
    ("/classify", {"text": None}, 422, "invalid_input", ["text: expected a string, got null"]),
    ("/entailment", {"inputs": {"premise": "a", "hypothesis": "b"}}, 422, "invalid_input",
     ["inputs: expected a list, got an object"]),
]


def _post(client, path, body, headers=None):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=content, headers={"content-type": "application/json", **(headers or {})})


@pytest.fixture(scope="module")
def answers(service_bundles):
    async def scenario():
        out = {}
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1)) as (app, client):
            for i, (path, body, *_rest) in enumerate(CASES):
                out[i] = await _post(client, path, body)
            # the content-type mistakes: curl -d (form-encoded) and no header at all
            out["form"] = await client.post("/classify", content=b'{"text": "hello"}',
                                            headers={"content-type": "application/x-www-form-urlencoded"})
            out["none"] = await client.post("/classify", content=b'{"text": "hello"}')
            out["ok"] = await _post(client, "/classify", {"text": "hello"})
        return out
    return asyncio.run(scenario())


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{json.dumps(c[1]) if not isinstance(c[1], bytes) else c[1]}"[:60] for c in CASES])
def test_validation_errors_say_where_what_and_what_to_send(answers, i):
    path, body, status, code, words = CASES[i]
    r = answers[i]
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    for word in words:
        assert word in error["message"], (word, error["message"])
    for leak in PYDANTIC_WORDING:
        assert leak not in error["message"], (leak, error["message"])


@pytest.mark.parametrize("case,named", [("form", "application/x-www-form-urlencoded"), ("none", "no content-type")])
def test_a_body_not_sent_as_json_is_named_as_such(answers, case, named):
    r = answers[case]
    assert r.status_code == 415, r.text
    error = r.json()["error"]
    assert error["code"] == "unsupported_media_type"
    assert named in error["message"] and "content-type: application/json" in error["message"]
    assert "valid dictionary" not in error["message"]
    assert answers["ok"].status_code == 200  # the same body with the header is fine


@pytest.fixture(scope="module")
def missing_fields(service_bundles):
    async def scenario():
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1)) as (app, client):
            return [await _post(client, path, body) for path, body in (
                ("/entailment", {}), ("/verify", {}), ("/entailment", {"inputs": [{}, {}]}),
                ("/classify", {"inputs": [{}, {}, {}]}))]
    return asyncio.run(scenario())


@pytest.mark.parametrize("case,problems", [
    (0, ["premise: required field missing", "hypothesis: required field missing"]),
    (1, ["claim: required field missing", "evidence: required field missing"]),
    (2, ["inputs[0].premise: required", "inputs[0].hypothesis: required", "inputs[1].premise: required",
         "and 1 more problems"]),
    (3, ["inputs[0].text: required", "inputs[1].text: required", "inputs[2].text: required"]),
])
def test_missing_fields_name_each_problem_and_the_hint_once(missing_fields, case, problems):
    """Two missing fields of one input, or the same field missing from every input, used to
    repeat the same "send {...}" hint two or three times."""
    message = missing_fields[case].json()["error"]["message"]
    for problem in problems:
        assert problem in message, (problem, message)
    assert message.count("send ") == 1 and message.count('{"inputs": [') == 1, message
    assert message.index("send ") > message.index(problems[-1])  # the hint closes the message


def test_every_limit_error_names_the_setting_that_raises_it(service_bundles):
    """413, too many inputs, texts too long (before or after NFKC, or together), an answer too
    large, a full queue, /v2's limits: each message says which ATTSERVE_* variable raises the
    limit. The evidence limit is the model's own (its config.json): the message says so."""
    async def scenario():
        limits = dict(max_inputs_per_request=2, max_text_chars=40, max_request_chars=60, max_answer_bytes=1024,
                      max_body_bytes=4000)
        out = {}
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1, **limits)) as (app, client):
            out["ATTSERVE_MAX_INPUTS_PER_REQUEST"] = await _post(client, "/classify", {"inputs": [{"text": "a"}] * 3})
            out["ATTSERVE_MAX_TEXT_CHARS"] = await _post(client, "/classify", {"text": "a" * 41})
            out["ATTSERVE_MAX_REQUEST_CHARS"] = await _post(client, "/classify",
                                                            {"inputs": [{"text": "a " * 18}, {"text": "b " * 18}]})
            out["ATTSERVE_MAX_ANSWER_BYTES"] = await _post(client, "/entailment", {
                "inputs": [{"premise": "a man is playing", "hypothesis": "a man"}] * 2, "explain": True})
            out["ATTSERVE_MAX_BODY_BYTES"] = await _post(client, "/classify", {"text": "a " * 3000})
            out["v2 ATTSERVE_MAX_INPUTS_PER_REQUEST"] = await _post(client, "/v2/models/sentiment/infer", {
                "inputs": [{"name": "text", "shape": [3], "datatype": "BYTES", "data": ["a", "b", "c"]}]})
            out["v2 ATTSERVE_MAX_BODY_BYTES"] = await _post(client, "/v2/models/sentiment/infer", {"pad": "a " * 3000})
            out["max_evidence"] = await _post(client, "/verify", {"claim": "a", "evidence": ["e"] * 6})
        async with running_app(Settings(model_repository=service_bundles, max_queue=1)) as (app, client):
            out["ATTSERVE_MAX_QUEUE"] = await _post(client, "/classify", {"inputs": [{"text": "a"}, {"text": "b"}]})
        return out

    answers = asyncio.run(scenario())
    statuses = {"ATTSERVE_MAX_BODY_BYTES": 413, "v2 ATTSERVE_MAX_BODY_BYTES": 413, "ATTSERVE_MAX_QUEUE": 429}
    for name, r in answers.items():
        v2 = name.startswith("v2 ")
        assert r.status_code == statuses.get(name, 422), (name, r.text)
        message = r.json()["error"] if v2 else r.json()["error"]["message"]
        if name == "max_evidence":
            assert "takes at most 5 (its max_evidence" in message and "no ATTSERVE_ setting" in message, message
        else:
            assert f"(limit set by {name.removeprefix('v2 ')})" in message, (name, message)


def test_the_limit_clause_names_real_settings():
    from service.inference.errors import set_by, setting_env

    assert set_by("max_body_bytes") == "(limit set by ATTSERVE_MAX_BODY_BYTES)"
    assert setting_env("request_timeout_ms") == "ATTSERVE_REQUEST_TIMEOUT_MS"
    with pytest.raises(KeyError):
        set_by("max_bodybytes")  # a typo in a message's setting fails at once, not in front of a client


def test_each_endpoints_errors_name_the_fields_it_takes(service_bundles):
    """The examples and did-you-mean candidates come from the task registry and the bodies the
    endpoints validate (service.http.errors.ENDPOINT_BODIES): every task's 422 example is its
    registry example (Task.example), its fields its registry fields and its schema's;
    /rerank's 422 offers TEI's fields, not `inputs`."""
    from core.tasks import TASKS
    from service.http.errors import ENDPOINT_BODIES, generic_input
    from service.http.schemas import TASK_SCHEMAS

    assert [path for path in ENDPOINT_BODIES if path in {t.endpoint for t in TASKS.values()}] == \
        [t.endpoint for t in TASKS.values()]
    for name, task in TASKS.items():
        body, schemas = ENDPOINT_BODIES[task.endpoint], TASK_SCHEMAS[name]
        one = json.dumps(task.example)
        generic = generic_input([(f.name, f.many) for f in task.fields])
        assert body.example == (f'{one} or {{"inputs": [{generic}, ...]}}' if schemas.has_batch_form else one), name
        assert body.input_fields == task.field_names and body.batch == schemas.has_batch_form, name
        assert set(body.fields) == set(schemas.fields) and set(task.field_names) <= set(body.fields), name
    rerank = ENDPOINT_BODIES[TASKS["rerank"].endpoint]
    assert not rerank.batch and set(rerank.fields) == set(TASK_SCHEMAS["rerank"].body.endpoint_fields) == {
        "query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction", "model", "version"}

    async def scenario():
        async with running_app(Settings(model_repository=service_bundles)) as (app, client):
            missing = {name: await client.post(task.endpoint, json={}) for name, task in TASKS.items()}
            return (missing,
                    await client.post("/rerank", json={"query": "q", "textz": ["a"]}),
                    await client.post("/rerank", json={"query": "q", "texts": ["a"], "raw_score": True}),
                    await client.post("/rerank", json={"query": "q", "texts": ["a"], "inputs": [{"query": "q"}]}),
                    await client.post("/classify", json={"inputs": [{"text": "a", "version": "1"}]}),
                    await client.get("/nothing"))
    missing, textz, near, inputs, misplaced, not_found = asyncio.run(scenario())
    for name, task in TASKS.items():
        r = missing[name]
        assert r.status_code == 422, (name, r.text)
        message = r.json()["error"]["message"]
        for f in task.fields:
            assert f"{f.name}: required field missing" in message, (name, message)
        assert message.endswith(f"; send {ENDPOINT_BODIES[task.endpoint].example}"), (name, message)
        assert json.dumps(task.example) in message, (name, message)
    message = textz.json()["error"]["message"]
    assert textz.status_code == 422 and json.dumps(TASKS["rerank"].example) in message
    assert "inputs" not in message and "explain" not in message
    assert "did you mean 'raw_scores'" in near.json()["error"]["message"]
    # `inputs` is no field of TEI's request: ignored, not refused (the test bundles hold no reranker: 404)
    assert inputs.status_code != 422 and inputs.headers.get("x-attserve-ignored-fields") in (None, "inputs"), inputs.text
    assert "goes at the top level" in misplaced.json()["error"]["message"]
    message = not_found.json()["error"]["message"]
    assert "inference: " + ", ".join(f"POST {t.endpoint}" for t in TASKS.values()) + ", POST /zero-shot" in message
