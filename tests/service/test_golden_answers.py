"""The shipped models answer byte for byte what they answered when tests/data/golden-answers.jsonl
was recorded (issue 62: a refactor of the request path must not change one byte of an answer):
the README's examples and 261 held requests over every task endpoint, /zero-shot, /predict,
/tokenize and the Open Inference Protocol, 4xx bodies included. What the file holds, what is
pinned and how to regenerate it: tests/golden_answers.py."""

from __future__ import annotations

import asyncio
import json

from tests import golden_answers as golden

REGENERATE = ("check what changed with `python -m tests.golden_answers --diff`, then, if every change is meant, "
              "regenerate with `python -m tests.golden_answers --write`")


def test_the_shipped_models_answer_byte_for_byte_as_recorded():
    header, entries = golden.read_golden()
    answers, versions = asyncio.run(golden.answer_all(entries))
    changed = golden.model_changes(header, versions)
    assert not changed, f"shipped bundles differ from the recorded ones ({'; '.join(changed)}): a model retrained on purpose? {REGENERATE}"
    exact = golden.platform_key() == header["platform"]
    found = golden.differences(entries, answers, exact)
    how = "byte for byte" if exact else (
        f"as JSON with floats within {golden.FLOAT_TOLERANCE} (this platform, {golden.platform_key()}, is not the "
        f"recording's, {header['platform']}, and onnxruntime's kernels differ in the last bits across CPUs)")
    assert not found, (f"{len(found)} of {len(entries)} answers differ from the recorded ones (compared {how}); "
                       f"the first, with a diff of the bodies:\n{found[0]}\nthe others: "
                       f"{[f.split(':', 1)[0] for f in found[1:20]]}\nAn unintended change is a regression; "
                       f"for an intended one, {REGENERATE} (or `--update ID... --reason` for a few entries)")


def test_the_golden_requests_cover_the_readme_examples_and_every_inference_endpoint():
    from tests.service.test_shipped_models import README, readme_examples

    _, entries = golden.read_golden()
    sent = {(e["path"], e["body"]) for e in entries}
    for path, body, _, line, _ in readme_examples(README.read_text(encoding="utf-8")):
        assert (path, json.dumps(body, ensure_ascii=False)) in sent, f"README line {line} is not in the golden file: {REGENERATE}"
    paths = {e["path"] for e in entries if e["status"] == 200}
    assert paths >= {"/classify", "/entailment", "/paraphrase", "/verify", "/rerank", "/zero-shot", "/predict", "/tokenize",
                     "/v2/models/nli-attconv-advanced/infer"}
    assert {e["status"] for e in entries} >= {200, 400, 404, 405, 415, 422}
    assert sum('"explain": true' in (e["body"] or "") for e in entries) >= 8
