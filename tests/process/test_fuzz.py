"""R3: fuzzing the live service. Schemathesis generates requests for every operation of
the running server's own /openapi.json (a bounded number per operation in CI); every answer
must be a non-5xx that the schema documents (status, content type, body). Then the hostile
inputs a generator rarely finds: empty and whitespace-only text, 1 MB text, invalid UTF-8, lone
surrogates, control characters, 10,000 evidence items, nested and mistyped JSON, unknown models.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis import checks

from core.tasks import TASKS
from tests.bundles import running_app

REPO = Path(__file__).resolve().parents[2]
from bench.harness import ServiceProcess  # noqa: E402

# Examples per operation: enough to reach every branch of the schemas (single/batch forms,
# model present or not) while the module stays well under a minute on two cores.
EXAMPLES_PER_OPERATION = 40
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,
]
# Not `positive_data_acceptance`: a schema-valid body may still be refused with a documented
# 422 (a model name that is not served, more evidence than the model takes, a text with no
# tokens after normalisation).


@pytest.fixture(scope="module")
def live_server(service_bundles, tmp_path_factory):
    server = ServiceProcess(service_bundles, tmp_path_factory.mktemp("fuzz") / "service.log",
                            max_batch_delay_ms=1, request_timeout_ms=10_000)
    with server.start():
        yield server
        server.terminate()
    errors = [r for r in server.log_records() if r["level"] == "ERROR"]
    assert not errors, errors[:3]  # no "unexpected error" or failed batch behind any answer


@pytest.fixture(scope="module")
def openapi(live_server):
    return schemathesis.openapi.from_url(f"{live_server.base}/openapi.json")


schema = schemathesis.pytest.from_fixture("openapi")


@schema.parametrize()
# No shrinking: a failure is reported as found, at once, instead of minutes of shrinking in CI.
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
def test_every_operation_against_its_schema(case, live_server):
    case.call_and_validate(base_url=live_server.base, checks=CHECKS)


def test_schema_covers_every_endpoint(live_server):
    paths = httpx.get(f"{live_server.base}/openapi.json").json()["paths"]
    v2 = {"/v2", "/v2/health/live", "/v2/health/ready"} | {
        f"/v2/models/{{name}}{version}{action}" for version in ("", "/versions/{version}") for action in ("", "/ready", "/infer", "/config")}
    tasks = {task.endpoint for task in TASKS.values()}  # every task of the registry (core.tasks)
    assert set(paths) == tasks | {"/health/live", "/health/ready", "/v1/models", "/metrics", "/tokenize", "/zero-shot", "/predict"} | v2
    assert {"/classify", "/entailment", "/verify", "/rerank", "/paraphrase"} <= tasks


# --- targeted cases -------------------------------------------------------------------------

MEGABYTE_TEXT = ("the team won the championship after extra time . " * 20_000)[:1_000_000]

# (id, path, raw body, expected status, expected error code or None for an answer)
CASES = [
    ("empty text", "/classify", {"text": ""}, 422, "invalid_input"),
    ("whitespace text", "/classify", {"text": " \t\n\u00a0\u3000"}, 422, "invalid_input"),
    ("whitespace hypothesis", "/entailment", {"premise": "a dog", "hypothesis": "\r\n"}, 422, "invalid_input"),
    ("whitespace evidence", "/verify", {"claim": "paris", "evidence": ["france", "  "]}, 422, "invalid_input"),
    ("invalid utf-8", "/classify", b'{"text": "caf\xc3 \xff\xfe"}', 422, "invalid_input"),
    ("lone surrogate", "/classify", b'{"text": "abc \\ud800 def"}', 422, "invalid_input"),
    ("lone surrogate in evidence", "/verify", b'{"claim": "x", "evidence": ["\\udfff"]}', 422, "invalid_input"),
    ("lone surrogate model name", "/classify", b'{"text": "a", "model": "\\ud800"}', 422, "unknown_model"),
    ("control characters", "/classify", {"text": "the team\u0000 won\u0007\u001b[31m \u202e!"}, 200, None),
    # nothing visible after normalization: 422, not a confident label
    ("control characters only", "/entailment", {"premise": "\u0000\u0001", "hypothesis": "\u007f"}, 422,
     "invalid_input"),
    ("zero-width characters only", "/classify", {"text": "\u200b\u200d\ufeff"}, 422, "invalid_input"),
    ("NFKC expansion", "/classify", {"text": "\ufdfa" * 20_000}, 422, "invalid_input"),
    ("10,000 evidence items", "/verify", {"claim": "paris", "evidence": ["paris is in france ."] * 10_000},
     422, "too_many_evidence"),
    ("10,000 inputs", "/classify", {"inputs": [{"text": "a"}] * 10_000}, 422, "too_many_inputs"),
    ("deeply nested array", "/classify", b"[" * 200_000 + b"]" * 200_000, 422, "invalid_input"),
    ("deeply nested text", "/classify", b'{"text": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001, 422, "invalid_input"),
    ("text is an object", "/classify", {"text": {"text": "a"}}, 422, "invalid_input"),
    ("text is a list", "/classify", {"text": ["a", "b"]}, 422, "invalid_input"),
    ("text is null", "/classify", {"text": None}, 422, "invalid_input"),
    ("evidence of numbers", "/verify", {"claim": "a", "evidence": [1, 2]}, 422, "invalid_input"),
    ("inputs is an object", "/entailment", {"inputs": {"premise": "a", "hypothesis": "b"}}, 422, "invalid_input"),
    ("inputs mixes forms", "/classify", {"inputs": [{"text": "a"}], "text": "b"}, 422, "invalid_input"),
    ("body is a list", "/classify", [{"text": "a"}], 422, "invalid_input"),
    ("body is a string", "/classify", "just text", 422, "invalid_input"),
    ("NaN literal", "/classify", b'{"text": NaN}', 422, "invalid_input"),
    ("truncated JSON", "/classify", b'{"text": "a', 422, "invalid_input"),
    ("empty body", "/classify", b"", 422, "invalid_input"),
    ("duplicate keys", "/classify", b'{"text": "first", "text": 3}', 422, "invalid_input"),
    ("unknown model", "/classify", {"text": "a", "model": "gpt-5"}, 422, "unknown_model"),
    ("unknown model, long name", "/entailment", {"premise": "a", "hypothesis": "b", "model": "x" * 10_000},
     422, "unknown_model"),
    ("unknown model, path-like", "/verify", {"claim": "a", "evidence": ["b"], "model": "../../etc/passwd"},
     422, "unknown_model"),
    ("model of another task", "/verify", {"claim": "a", "evidence": ["b"], "model": "topic"}, 422, "wrong_task"),
    ("labels of numbers", "/zero-shot", {"text": "a", "candidate_labels": [1, 2]}, 422, "invalid_input"),
    ("megabyte label", "/zero-shot", {"text": "a", "candidate_labels": ["x" * 1_000_000]}, 422, "invalid_input"),
    ("template of braces only", "/zero-shot", {"text": "a", "candidate_labels": ["b"], "hypothesis_template": "{}{}"},
     422, "invalid_input"),
    ("model is a number", "/classify", {"text": "a", "model": 7}, 422, "invalid_input"),
    # over ATTSERVE_MAX_TEXT_CHARS (100,000): refused before tokenizing
    ("1 MB text", "/classify", {"text": MEGABYTE_TEXT, "model": "topic"}, 422, "invalid_input"),
    ("longest accepted text", "/classify", {"text": MEGABYTE_TEXT[:100_000], "model": "topic"}, 200, None),
    # /tokenize takes the task endpoints' bodies, with their refusals
    ("tokenize: no task's fields", "/tokenize", {"inputs": {"premise": "a"}}, 422, "invalid_input"),
    ("tokenize: body is a list", "/tokenize", [{"text": "a"}], 422, "invalid_input"),
    ("tokenize: model is a number", "/tokenize", {"text": "a", "model": 7}, 422, "invalid_input"),
    ("tokenize: lone surrogate", "/tokenize", b'{"text": "abc \\ud800 def"}', 422, "invalid_input"),
    ("tokenize: 1 MB text", "/tokenize", {"text": MEGABYTE_TEXT, "model": "topic"}, 422, "invalid_input"),
    ("tokenize: 10,000 evidence items", "/tokenize", {"claim": "paris", "evidence": ["paris"] * 10_000},
     422, "too_many_evidence"),
]


@pytest.mark.parametrize("path,body,status,code", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_gets_a_clean_answer(live_server, path, body, status, code):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(live_server.base + path, content=content, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == status, r.text[:500]
    answer = r.json()
    if code is None:
        assert set(answer) >= {"label", "scores", "model", "truncated"}
        assert abs(sum(answer["scores"].values()) - 1.0) < 1e-6
    else:
        assert set(answer) == {"error"} and answer["error"]["code"] == code and answer["error"]["message"]
        assert len(answer["error"]["message"]) < 2_000 or code == "unknown_model"


def test_longest_accepted_text_is_truncated_to_its_first_tokens(live_server):
    post = lambda text: httpx.post(live_server.base + "/classify", json={"text": text, "model": "topic"},  # noqa: E731
                                   timeout=60).json()
    big = post(MEGABYTE_TEXT[:100_000])  # ATTSERVE_MAX_TEXT_CHARS
    assert big["truncated"] is True
    head = " ".join(MEGABYTE_TEXT.split()[:32])  # topic takes 32 tokens; each word here is one
    assert post(head)["scores"] == pytest.approx(big["scores"], abs=1e-6)
    assert httpx.get(live_server.base + "/health/ready").status_code == 200


def test_megabyte_text_does_not_stall_other_requests(service_bundles, monkeypatch):
    """Tokenizing 1 MB takes a noticeable fraction of a second; it must happen off the event
    loop, so /health/live keeps answering meanwhile (in-process: one loop for app and client).
    Inline, not a single probe could be answered while the encoder runs."""
    from service.settings import Settings
    from core.tokenization import TextEncoder

    encoding: list[float] = []  # start and end of the 1 MB text's encode call
    encode = TextEncoder.encode

    def timed_encode(self, texts, max_length, describe=None):
        big = any(len(t) > 100_000 for t in texts)
        if big:
            encoding.append(time.perf_counter())
        try:
            return encode(self, texts, max_length, describe)
        finally:
            if big:
                encoding.append(time.perf_counter())

    monkeypatch.setattr(TextEncoder, "encode", timed_encode)

    async def scenario():
        # the text limits raised to let 1 MB through: this checks where tokenizing runs
        async with running_app(Settings(model_repository=service_bundles, max_batch_delay_ms=1,
                                        max_text_chars=1 << 20, max_request_chars=1 << 20)) as (app, client):
            big = asyncio.ensure_future(client.post("/classify", json={"text": MEGABYTE_TEXT, "model": "topic"}))
            answered = []  # when each liveness probe was answered
            while not big.done():
                assert (await client.get("/health/live")).status_code == 200
                answered.append(time.perf_counter())
                await asyncio.sleep(0.005)  # the in-process transport never suspends by itself
            assert (await big).status_code == 200
            return answered

    answered = asyncio.run(scenario())
    start, end = encoding
    during = [t for t in answered if start < t < end]
    assert len(during) >= 3, f"{len(during)} probes answered during a {end - start:.3f} s encode"
