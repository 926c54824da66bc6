"""`"explain": true`: the attention each network used, exposed as an extra graph output
(export.explanations) and returned per input by the service.

- For every architecture and mode: the exposed tensor IS the network's attention (equal to the
  PyTorch tensor), and in onnxruntime each row's explanation equals its solo run, whatever
  its neighbours (batch invariance holds for explanations as for scores).
- Through the service, on one small bundle of each family that explains (AttConv advanced
  entailment, AttConv-light context-wise and advanced context-conc verification, ABCNN-3,
  ACT) and one that cannot (BCNN): matrix sizes equal the kept tokens, rows sum to 1, the
  same input gives the same answer (scores and explanation) alone, inside an `inputs` batch
  and among concurrent neighbours of other lengths, offsets point into the text, unknown and
  truncated tokens are marked, and `explain: false` answers carry nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.bundles import CORPUS, running_app
from tests.model_cases import CASES, build, case_id
from tests.unit.test_networks import stack_padded, varied_example

pytestmark = pytest.mark.timeout(300)

GAP = 1e-5


def _cut(spec, tensor: np.ndarray, row: int, example, count: int) -> list[np.ndarray]:
    """Example `row`'s own part of the explanation output (an independent reading of the
    layouts the service's runtime implements), as one matrix per evidence or a single one."""
    sizes = [int((t[0] != 0).sum(-1).max()) if t.dim() == 2 else None for t in example]
    if spec.kind == "token_weights":
        return [tensor[row, : sizes[0]]]
    if spec.layout == "batch":
        rows, columns = ((sizes[1], sizes[0]) if spec.rows == "hypothesis_ids" else
                         (sizes[0], sizes[1]) if spec.rows == "premise_ids" else (sizes[0], sizes[0]))
        return [tensor[row, :rows, :columns]]
    claim = sizes[0]
    evidence = example[1][0]  # (K, Le)
    out = []
    for k in range(evidence.shape[0]):
        length = int((evidence[k] != 0).sum())
        if spec.layout == "evidence_slots":
            out.append(tensor[row * count + k, :claim, :length])
        else:
            width = tensor.shape[2] // count
            out.append(tensor[row, :claim, k * width : k * width + length])
    return out


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_exposed_attention_is_the_networks_own_and_batch_invariant(case, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from export.explanations import explanation_spec, expose_explanation, torch_explanation
    from export.onnx_graph import export_onnx

    torch.manual_seed(0)
    net = build(case).eval()
    path = export_onnx(net, tmp_path / "model.onnx")
    spec = expose_explanation(path, net)
    arch = case[0]
    if arch in ("bcnn", "abcnn-2", "transformer"):
        assert spec is None and explanation_spec(net) is None  # no token attention to show
        return
    assert spec is not None
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    task_spec = net.task
    g = torch.Generator().manual_seed(6)
    examples = [varied_example(case[1], g, length, count) for length, count in ((4, 1), (19, 4), (9, 2))]

    def run(ids):
        feed = {n: t.numpy() for n, t in zip(task_spec.inputs, ids)}
        return session.run([*task_spec.outputs, spec.output], feed)

    batch = stack_padded(examples)
    got = run(batch)
    # the graph's explanation is the PyTorch network's attention, same layout
    want = torch_explanation(net, [t.numpy() for t in batch])
    np.testing.assert_allclose(got[-1], want, atol=1e-5, rtol=0)
    count = batch[-1].shape[1] if case[1] == "verification" else 1
    for row, example in enumerate(examples):
        solo = run(example)
        mine = _cut(spec, got[-1], row, example, count)
        alone = _cut(spec, solo[-1], 0, example, example[-1].shape[1] if case[1] == "verification" else 1)
        for a, b in zip(mine, alone, strict=True):
            assert a.shape == b.shape and a.size > 0
            gap = float(np.abs(a - b).max())
            assert gap < GAP, f"row {row}: explanation differs from its solo run by {gap:.2e}"
            if not spec.normalize_rows:  # softmax rows (or token weights) already sum to 1 over valid tokens
                np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)


# --- through the service ----------------------------------------------------------------------

FAMILIES = {
    # name: (architecture, task, overrides, labels, max_lengths, max_evidence)
    "adv-nli": ("attconv-advanced", "entailment", {}, ("entailment", "neutral", "contradiction"),
                {"premise_ids": 24, "hypothesis_ids": 16}, None),
    "abcnn3-nli": ("abcnn-3", "entailment", {"num_blocks": 2}, ("entailment", "neutral", "contradiction"),
                   {"premise_ids": 24, "hypothesis_ids": 16}, None),
    "bcnn-nli": ("bcnn", "entailment", {"num_blocks": 1}, ("entailment", "neutral", "contradiction"),
                 {"premise_ids": 24, "hypothesis_ids": 16}, None),
    "act-topic": ("act", "classification", {}, ("world", "sports", "business"), {"input_ids": 32}, None),
    "wise-fever": ("attconv-light", "verification", {"multi_context": "wise"},
                   ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO"), {"claim_ids": 16, "evidence_ids": 20}, 4),
    "conc-fever": ("attconv-advanced", "verification", {"multi_context": "conc"},
                   ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO"), {"claim_ids": 16, "evidence_ids": 20}, 4),
}


@pytest.fixture(scope="module")
def family_repository(tmp_path_factory) -> Path:
    from export.bundle import write_bundle_from_network
    from tests.model_cases import SMALL, family
    from models import build_network
    from training.tokenizer import build_tokenizer, save_tokenizer

    root = tmp_path_factory.mktemp("families") / "repository"
    root.mkdir(parents=True)
    tokenizer_path = save_tokenizer(build_tokenizer(CORPUS), root.parent / "tokenizer.json")
    vocab_size = build_tokenizer(CORPUS).get_vocab_size(with_added_tokens=True)
    for seed, (name, (arch, task, over, labels, max_lengths, max_evidence)) in enumerate(FAMILIES.items()):
        torch.manual_seed(seed)
        network = build_network(arch, task=task, vocab_size=vocab_size, num_labels=len(labels), dropout=0.0,
                                **SMALL[family(arch)], **over)
        write_bundle_from_network(network, arch, name, list(labels), tokenizer_path, root / name,
                                  max_lengths=max_lengths, max_evidence=max_evidence, version=f"test-{seed}")
    return root


REQUESTS = {
    "adv-nli": ("/entailment", {"premise": "a man is playing a zqxwvy guitar on the stage .",
                                "hypothesis": "nobody is playing any music ."}),
    "abcnn3-nli": ("/entailment", {"premise": "two dogs run across the snowy field .",
                                   "hypothesis": "the dogs are sleeping ."}),
    "bcnn-nli": ("/entailment", {"premise": "two dogs run across the snowy field .", "hypothesis": "dogs run ."}),
    "act-topic": ("/classify", {"text": "the team won the championship after extra time ."}),
    "wise-fever": ("/verify", {"claim": "paris is the capital of france .",
                               "evidence": ["the eiffel tower was completed in 1889 .", "paris is the capital ."]}),
    "conc-fever": ("/verify", {"claim": "berlin is the largest city of germany .",
                               "evidence": ["berlin is the capital of germany and its largest city .",
                                            "the moon orbits the earth .", "water boils ."]}),
}
NEIGHBOURS = {
    "/entailment": [{"premise": "the children are sleeping in a tent .", "hypothesis": "kids sleep ."},
                    {"premise": "a woman is slicing an onion in the kitchen and the stock market fell sharply on "
                                "monday .", "hypothesis": "a woman is cooking dinner in the kitchen at home ."}],
    "/classify": [{"text": "worst service ."},
                  {"text": "scientists discovered a new species of frog in the rainforest and parliament passed "
                           "the budget bill late at night ."}],
    "/verify": [{"claim": "water boils .", "evidence": ["water boils at 100 degrees celsius at sea level ."]},
                {"claim": "mount everest is the highest mountain above sea level on the earth .",
                 "evidence": ["mount everest is the highest mountain .", "the moon orbits the earth roughly every "
                              "27 days .", "paris is the capital of france .", "two dogs run ."]}],
}


def _check_shapes(name: str, body: dict, explanation: dict) -> None:
    tokens = explanation["tokens"]
    for field, value in tokens.items():  # offsets point into the text sent
        sentences = value if field == "evidence" else [value]
        texts = body[field] if field == "evidence" else [body[field]]
        for text, sentence in zip(texts, sentences, strict=True):
            for t in sentence:
                assert t["token"] == text[t["start"]:t["end"]].lower(), (field, t)
    if name == "bcnn-nli":
        assert explanation["method"] is None
        assert not {"alignment", "token_weights", "evidence"} & explanation.keys()
        return
    assert explanation["method"]
    if "token_weights" in explanation:
        weights = np.array(explanation["token_weights"])
        assert weights.shape == (len(tokens["text"]),)
        assert weights.sum() == pytest.approx(1.0, abs=1e-3)
        return
    if "alignment" in explanation:
        alignment = explanation["alignment"]
        assert (alignment["rows"], alignment["columns"]) == ("hypothesis", "premise")
        matrices = [(np.array(alignment["weights"]), tokens["hypothesis"], tokens["premise"])]
    else:
        assert len(explanation["evidence"]) == len(body["evidence"])
        matrices = [(np.array(e["alignment"]["weights"]), tokens["claim"], sentence)
                    for e, sentence in zip(explanation["evidence"], tokens["evidence"])]
    for matrix, rows, columns in matrices:
        assert matrix.shape == (len(rows), len(columns))
        np.testing.assert_allclose(matrix.sum(-1), 1.0, atol=1e-3)


def _close(a, b, path="") -> None:
    """Two explanations equal up to the 4 decimals they are sent with."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert abs(a - b) <= 2e-4, f"{path}: {a} vs {b}"
    else:
        assert a == b, path


def test_explanations_through_the_service(family_repository):
    from service.settings import Settings

    async def scenario():
        async with running_app(Settings(model_repository=str(family_repository), max_batch_delay_ms=20)) as (app, c):
            models = {m["name"]: m for m in (await c.get("/v1/models")).json()["models"]}
            assert models["bcnn-nli"]["explanation"] is None
            assert "attention" in models["adv-nli"]["explanation"]
            for name, (path, body) in REQUESTS.items():
                plain = (await c.post(path, json={**body, "model": name})).json()
                assert "explanation" not in plain  # the default answer is unchanged
                solo = await c.post(path, json={**body, "model": name, "explain": True})
                assert solo.status_code == 200, solo.text
                answer = solo.json()
                assert answer["label"] == plain["label"]
                _check_shapes(name, body, answer["explanation"])
                # the same input among neighbours of other lengths, in one request and concurrently
                neighbours = NEIGHBOURS[path]
                batch = await c.post(path, json={"model": name, "explain": True,
                                                 "inputs": [neighbours[0], body, neighbours[1]]})
                assert batch.status_code == 200, batch.text
                # the whole answer (label, scores, evidence scores, explanation), not only the explanation
                _close(batch.json()["results"][1], answer, name)
                concurrent = await asyncio.gather(*(
                    c.post(path, json={**x, "model": name, "explain": True}) for x in [*neighbours, body]))
                _close(concurrent[-1].json(), answer, name)
                for x, r in zip([*neighbours, body], concurrent):
                    _check_shapes(name, x, r.json()["explanation"])

    asyncio.run(scenario())


def test_unknown_and_truncated_tokens_are_marked(family_repository):
    from service.settings import Settings

    long_premise = " ".join(CORPUS[:6])  # well over the 24-token premise limit
    async def scenario():
        async with running_app(Settings(model_repository=str(family_repository))) as (app, c):
            r = await c.post("/entailment", json={"premise": long_premise, "hypothesis": "a zqxwvy is playing music .",
                                                  "model": "adv-nli", "explain": True})
            answer = r.json()
            assert answer["truncated"] is True
            explanation = answer["explanation"]
            premise, hypothesis = explanation["tokens"]["premise"], explanation["tokens"]["hypothesis"]
            # the 24 tokens the model read are described, the rest counted
            everything = len(long_premise.split())
            assert len(premise) == 24 and explanation["cut_tokens"] == {"premise": everything - 24, "hypothesis": 0}
            assert premise[-1]["end"] < len(long_premise) and "truncated" not in premise[0]
            assert np.array(explanation["alignment"]["weights"]).shape == (len(hypothesis), 24)
            unknown = [t["token"] for t in hypothesis if t["unknown"]]
            assert unknown == ["zqxwvy"]

    asyncio.run(scenario())


def test_config_refuses_an_explanation_named_like_an_output():
    from pydantic import ValidationError

    from core.bundle import BundleConfig, ExplanationOutput

    base = dict(name="x", version="1", task="entailment", architecture="attconv-light", labels=["a", "b"],
                inputs=["premise_ids", "hypothesis_ids"], outputs=["logits"],
                max_lengths={"premise_ids": 4, "hypothesis_ids": 4}, opset=18, onnx_version="1",
                onnxruntime_version="1", model_sha256="0" * 64, tokenizer_sha256="0" * 64)
    good = ExplanationOutput(output="explanation", kind="alignment", rows="hypothesis_ids", columns="premise_ids",
                             method="m")
    assert BundleConfig(**base, explanation=good).explanation == good
    for bad in (good.model_copy(update={"output": "logits"}), good.model_copy(update={"rows": "claim_ids"}),
                good.model_copy(update={"columns": None})):
        with pytest.raises(ValidationError):
            BundleConfig(**base, explanation=bad)
