"""Error messages in the service's own words (issue 17): where (the JSON path), what was
wrong and what to send; pydantic's phrasing never reaches a client; a body sent without the
JSON content-type is named as such."""

from __future__ import annotations

import asyncio
import json

import pytest

from bundles import running_app
from service.settings import Settings

PYDANTIC_WORDING = ("Value error", "JSON decode error", "Input should be", "Extra inputs are not permitted",
                    "Field required", "valid dictionary", "List should have")

CASES = [
    # path, raw body, content-type, status, code, words the message must hold
    ("/classify", {"inputs": [{"text": "a"}], "text": "b"}, 422, "invalid_input",
     ["text:", "either one input or a batch", '"inputs"']),
    ("/classify", {"text": "ok", "extra": 1}, 422, "invalid_input", ["extra: unknown field", '{"text": "..."}']),
    ("/classify", {"text": "   "}, 422, "invalid_input", ["text: text must not be empty or whitespace-only"]),
    ("/classify", {"text": 42}, 422, "invalid_input", ["text: expected a string, got a number"]),
    ("/classify", {"inputs": []}, 422, "invalid_input", ["inputs: empty list", "at least one"]),
    ("/classify", [{"text": "a"}], 422, "invalid_input", ["body: expected a JSON object, got a list", '{"text": "..."}']),
    ("/entailment", {"premise": "a"}, 422, "invalid_input",
     ["hypothesis: required field missing", '{"premise": "...", "hypothesis": "..."}']),
    ("/entailment", {"inputs": [{"premise": "a", "hypothesis": "b"}, {"premise": "a", "hypothesis": 3}]}, 422,
     "invalid_input", ["inputs[1].hypothesis: expected a string, got a number"]),
    ("/verify", {"claim": "a", "evidence": "not a list"}, 422, "invalid_input",
     ["evidence: expected a list, got a string"]),
    ("/verify", {"claim": "a", "evidence": ["ok", 7]}, 422, "invalid_input", ["evidence[1]: expected a string"]),
    ("/classify", b'{"text": "a', 422, "invalid_input", ["body: not valid JSON", "at character"]),
    ("/classify", b"", 422, "invalid_input", ["body: empty", '{"text": "..."}']),
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
