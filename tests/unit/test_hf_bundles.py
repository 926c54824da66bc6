"""The transformers bundle kind (core.transformers_bundle, export.import_hf,
service.inference.transformers_runtime): tiny BERT (WordPiece, token_type_ids) and RoBERTa
(byte-level BPE, no token_type_ids, pad id 1) classifiers built locally (tests/hf_models.py),
exported with torch.onnx.export, imported, and run by the service's runtime against transformers'
own tokenizer and forward."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from core.bundle import BundleError, load_bundle  # noqa: E402 (after the importorskip)
from core.tasks import TASKS  # noqa: E402 (after the importorskip)
from export.import_hf import ImportRefused, build_config, map_labels, write_import  # noqa: E402 (after the importorskip)
from service.inference.runtime import CPU, ModelRuntime  # noqa: E402 (after the importorskip)
from service.inference.tasks import encode  # noqa: E402 (after the importorskip)
from tests.hf_models import build_export, reference  # noqa: E402 (after the importorskip)

KINDS = ("bert", "roberta", "deberta-v2")
MAX_LENGTH = 40  # both tiny models' sequence length
LONG = " ".join(["the children are playing football in the park near the kitchen"] * 6)
PAIRS = [
    ("a man is playing a guitar on the stage .", "a person is making music ."),
    ("the cat sleeps .", "two dogs run across the snowy field near the warm kitchen ."),
    ("Paris is the capital of France.", "Nobody is in the kitchen!"),
    (LONG, "a person is making music ."),  # the premise cut
    ("kids play .", LONG),  # the hypothesis cut
    (LONG, LONG + " again"),  # both cut, longest first
]
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """kind -> (the export folder, its imported entailment bundle)."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for kind in KINDS:
        export = build_export(kind, root / "exports")
        bundle = root / "repository" / f"{kind}-nli"
        write_import(*build_config(export, "entailment", bundle.name, None, None), bundle)
        out[kind] = (export, bundle)
    return out


def expected_logits(export: Path, pairs: list[tuple[str, ...]]) -> np.ndarray:
    """transformers' forward on its own fast tokenizer's padded, truncated batch."""
    model, tokenizer = reference(export)
    batch = tokenizer(*zip(*pairs), padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits.numpy()


def items(runtime, pairs, fields=("premise", "hypothesis")):
    encoded = encode(runtime, [SimpleNamespace(**dict(zip(fields, p))) for p in pairs])
    return encoded


@pytest.mark.parametrize("kind", KINDS)
def test_sequences_are_the_tokenizers_own(imported, kind):
    """Each pair's sequence (ids, token types) is what transformers' fast tokenizer makes of it,
    the long ones cut longest-first to the model's length, and flagged as cut."""
    export, bundle = imported[kind]
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    _, tokenizer = reference(export)
    for pair, e in zip(PAIRS, items(runtime, PAIRS), strict=True):
        own = tokenizer(*pair, truncation=True, max_length=MAX_LENGTH)
        sequence = e.item.ids[0]
        assert list(sequence) == own["input_ids"]
        if "token_type_ids" in own:
            assert sequence.type_ids == own["token_type_ids"]
        assert e.truncated == (len(tokenizer(*pair)["input_ids"]) > MAX_LENGTH)
    assert [e.truncated for e in items(runtime, PAIRS)] == [False, False, False, True, True, True]


def test_sequences_pad_to_steps_of_8_tokens_up_to_64_then_powers_of_two():
    """A transformer's cost grows with every padded token: a sequence pads to the next multiple of
    8 up to 64 tokens (a 19-token pair runs as 24, not 32), then to a power of two."""
    from service.inference.runtime import MIN_LENGTH_BUCKET, TRANSFORMER_STEPS_UP_TO, length_buckets

    assert length_buckets(512, steps_up_to=TRANSFORMER_STEPS_UP_TO) == [8, 16, 24, 32, 40, 48, 56, 64, 128, 256, 512]
    assert length_buckets(512) == [8, 16, 32, 64, 128, 256, 512]  # the attserve kind's, per field: unchanged
    assert MIN_LENGTH_BUCKET == 8


def test_a_bundles_items_take_the_fine_buckets(imported):
    export, bundle = imported["bert"]
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    for e in items(runtime, PAIRS):
        length = len(e.item.ids[0])
        assert e.item.shape == (next(b for b in runtime.buckets["input_ids"] if b >= length),)
        assert e.item.shape[0] - length < 8 or length > 64
    warmed = {item.shape for _, item in runtime.warmup_shapes(32, 16384)}
    assert warmed == {(b,) for b in runtime.buckets["input_ids"]}  # every bucket warmed, no first request pays


@pytest.mark.parametrize("kind", KINDS)
def test_logits_equal_transformers_forward(imported, kind):
    """Served logits, one pair at a time and as one padded batch of mixed lengths (with the
    batch grid: padding rows too), equal transformers' forward within 1e-5."""
    export, bundle = imported[kind]
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    expected = expected_logits(export, PAIRS)
    made = [e.item for e in items(runtime, PAIRS)]
    alone = np.stack([runtime.run_call([item]).logits[0] for item in made])
    np.testing.assert_allclose(alone, expected, atol=TOLERANCE, rtol=0)
    runtime.use_batch_grid(8)  # 6 items run as 8 rows
    together = runtime.run_call(made).logits
    np.testing.assert_allclose(together, expected, atol=TOLERANCE, rtol=0)
    # batch invariance: an item's answer whatever else is in its batch
    for k, item in enumerate(made):
        others = runtime.run_call([made[-1], item, made[0]]).logits[1]
        np.testing.assert_allclose(others, alone[k], atol=TOLERANCE, rtol=0)
    assert np.ptp(expected, axis=0).max() > 1e-3, "the tiny model answers every pair alike: the check is void"


def test_single_text_classifier(imported, tmp_path):
    """The same graph imported as a classifier reads one text: [CLS] text [SEP], its labels kept."""
    export, _ = imported["bert"]
    bundle = tmp_path / "bert-topics"
    write_import(*build_config(export, "classification", bundle.name, ["sport", "music", "food"], None), bundle)
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    texts = ["a man is playing a guitar on the stage .", LONG]
    made = items(runtime, [(t,) for t in texts], fields=("text",))
    model, tokenizer = reference(export)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).logits.numpy()
    np.testing.assert_allclose(runtime.run_call([e.item for e in made]).logits, expected, atol=TOLERANCE, rtol=0)
    assert [e.truncated for e in made] == [False, True]
    assert load_bundle(bundle).config.labels == ["sport", "music", "food"]


def test_bundle_keeps_both_configs(imported):
    """Ours is config.json (kind transformers, their labels mapped, the sequence length); theirs
    is kept whole as transformers_config.json."""
    export, bundle = imported["roberta"]
    config = load_bundle(bundle).config
    assert config.kind == "transformers"
    assert config.labels == ["entailment", "neutral", "contradiction"]
    assert config.transformers.source_labels == ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]
    assert config.transformers.graph_inputs == ["input_ids", "attention_mask"]  # RoBERTa: no token types
    assert (config.transformers.pad_id, config.transformers.max_length) == (1, MAX_LENGTH)  # 42 positions - 2
    assert (bundle / "transformers_config.json").read_bytes() == (export / "config.json").read_bytes()


@pytest.mark.parametrize("source,given,expected", [
    (["ENTAILMENT", "NEUTRAL", "CONTRADICTION"], None, ["entailment", "neutral", "contradiction"]),
    (["contradiction", "entailment"], None, ["contradiction", "entailment"]),
    (["entailment", "not_entailment"], None, ["entailment", "not_entailment"]),
    (["LABEL_0", "LABEL_1", "LABEL_2"], "entailment,neutral,contradiction", ["entailment", "neutral", "contradiction"]),
])
def test_label_mapping(source, given, expected):
    assert map_labels("entailment", source, given.split(",") if given else None) == expected


@pytest.mark.parametrize("task,source,given,says", [
    ("entailment", ["entailment", "entails", "neutral"], None, "ambiguous"),
    ("entailment", ["yes", "no", "maybe"], None, "fit no entailment label"),
    ("entailment", ["LABEL_0", "LABEL_1"], None, "--labels"),
    ("classification", ["LABEL_0", "LABEL_1"], None, "--labels"),
    ("entailment", ["a", "b", "c"], ["entailment", "neutral"], "names 2 labels but the model has 3"),
    ("entailment", ["neutral", "contradiction"], None, "means entailment"),
    ("paraphrase", ["equivalent", "duplicate"], None, "ambiguous"),
])
def test_label_refusals(task, source, given, says):
    with pytest.raises(ImportRefused, match=says):
        map_labels(task, source, given)


def test_refusals_say_what_to_do(imported, tmp_path):
    """A folder without tokenizer.json, a graph without logits, labels that fit no task, no
    task: refused, each message naming the fix."""
    export, _ = imported["bert"]
    no_tokenizer = shutil.copytree(export, tmp_path / "no-tokenizer")
    (no_tokenizer / "tokenizer.json").unlink()
    with pytest.raises(ImportRefused, match=r"no tokenizer.json: save the model's fast tokenizer"):
        build_config(no_tokenizer, "entailment", "x", None, None)
    from typer.testing import CliRunner

    from cli.main import app
    typed = CliRunner().invoke(app, ["bundle", "import-hf", str(no_tokenizer), "--task", "entailment",
                                     "-o", str(tmp_path / "out")])
    assert typed.exit_code == 2 and "no tokenizer.json" in typed.output and not (tmp_path / "out").exists()

    onnx = pytest.importorskip("onnx")
    no_logits = shutil.copytree(export, tmp_path / "no-logits")
    graph = onnx.load(str(no_logits / "model.onnx"))
    for node in graph.graph.node:
        node.output[:] = ["scores" if o == "logits" else o for o in node.output]
    graph.graph.output[0].name = "scores"
    onnx.save(graph, str(no_logits / "model.onnx"))
    with pytest.raises(ImportRefused, match=r"no output named 'logits' \(outputs: \['scores'\]\); export the "
                                            r"sequence-classification head"):
        build_config(no_logits, "entailment", "x", None, None)

    odd_labels = shutil.copytree(export, tmp_path / "odd-labels")
    their = json.loads((odd_labels / "config.json").read_text())
    their["id2label"] = {"0": "sports", "1": "politics", "2": "tech"}
    (odd_labels / "config.json").write_text(json.dumps(their))
    with pytest.raises(ImportRefused, match=r"fit no entailment label .* name each logit with --labels"):
        build_config(odd_labels, "entailment", "x", None, None)
    with pytest.raises(ImportRefused, match="not a task; one of"):
        build_config(export, "sentiment", "x", None, None)


def test_a_bundle_whose_graph_changed_is_refused(imported, tmp_path):
    """The served graph must take the feeds config.json names (checked when it loads)."""
    _, bundle = imported["roberta"]
    other = shutil.copytree(bundle, tmp_path / "changed")
    config = json.loads((other / "config.json").read_text())
    config["transformers"]["graph_inputs"] = ["input_ids", "attention_mask", "token_type_ids"]
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(BundleError, match=r"inputs \['input_ids', 'attention_mask'\], but .* names"):
        ModelRuntime.load(other, [CPU], 1)
    assert TASKS["entailment"].inputs == ("premise_ids", "hypothesis_ids")


def test_reranker_scores_each_pair_on_its_own(imported, tmp_path):
    """A one-logit cross-encoder imported for rerank: each text's score is transformers' logit of
    the (query, text) pair (cut longest-first on its own), whatever else the list holds; a
    two-logit model is refused for rerank."""
    export = build_export("bert", tmp_path / "exports", {0: "LABEL_0"})
    bundle = tmp_path / "cross-encoder"
    write_import(*build_config(export, "rerank", bundle.name, None, None, max_texts=8), bundle)
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    runtime.use_batch_grid(4)
    query = "what is the man playing on the stage ?"
    texts = [t for _, t in PAIRS] + [LONG]
    model, tokenizer = reference(export)
    batch = tokenizer([query] * len(texts), texts, padding=True, truncation=True, max_length=MAX_LENGTH,
                      return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).logits.numpy()[:, 0]
    [listed] = encode(runtime, [SimpleNamespace(query=query, texts=texts)])
    np.testing.assert_allclose(runtime.run_call([listed.item]).per_text[0], expected, atol=TOLERANCE, rtol=0)
    assert listed.truncated
    # a text's score alone, and as the second input of a batch beside a longer list
    alone = encode(runtime, [SimpleNamespace(query=query, texts=[t]) for t in texts])
    for k, e in enumerate(alone):
        two = runtime.run_batch([listed.item, e.item])[0].per_text
        assert two[1] == pytest.approx([expected[k]], abs=TOLERANCE)
    assert np.ptp(expected) > 1e-3
    with pytest.raises(ImportRefused, match="one logit"):
        build_config(imported["roberta"][0], "rerank", "x", None, None)


@pytest.mark.parametrize("kind,unknown", [("bert", True), ("roberta", False), ("deberta-v2", True)])
def test_unknown_token_share(imported, kind, unknown):
    """unknown_token_share counts the model's unknown token among the texts' own tokens (not the
    template's): WordPiece and Unigram map an unseen character to it; byte-level BPE has none."""
    _, bundle = imported[kind]
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    plain, odd = encode(runtime, [SimpleNamespace(premise="the cat sleeps .", hypothesis="a dog ."),
                                  SimpleNamespace(premise="the cat sleeps \u20ac", hypothesis="\u2603 dog .")])
    assert plain.unknown_share == 0.0
    odd_input = SimpleNamespace(premise="the cat sleeps \u20ac", hypothesis="\u2603 dog .")
    fields = runtime.encoder.encode_fields(TASKS["entailment"], [odd_input], MAX_LENGTH)
    total = sum(len(encoded.ids[0]) for _, encoded, _ in fields)
    count = sum(encoded.unknown[0] for _, encoded, _ in fields)
    assert (count > 0) is unknown and odd.unknown_share == pytest.approx(count / total, abs=1e-4)


def test_verification_reads_each_evidence_sentence_against_the_claim(imported, tmp_path):
    """An NLI model imported for verification: its labels read as FEVER's; each evidence sentence
    is the premise of the claim on its own, the claim takes the logits of the sentence whose pair
    is least neutral, and evidence_scores are each pair's 1 - P(neutral) as shares; an answer is
    the same alone and in a batch."""
    export, _ = imported["bert"]
    bundle = tmp_path / "bert-fever"
    write_import(*build_config(export, "verification", bundle.name, None, None, max_texts=4), bundle)
    runtime = ModelRuntime.load(bundle, [CPU], 1)
    assert runtime.config.labels == ["SUPPORTS", "NOT ENOUGH INFO", "REFUTES"]  # ENTAILMENT, NEUTRAL, CONTRADICTION
    claims = [("a person is making music .", [p for p, _ in PAIRS[:3]]), ("kids play .", [LONG, PAIRS[1][1]])]
    model, tokenizer = reference(export)
    made = [e.item for e in encode(runtime, [SimpleNamespace(claim=c, evidence=e) for c, e in claims])]
    together = runtime.run_batch(made)[0]
    for row, (claim, evidence) in enumerate(claims):
        batch = tokenizer(evidence, [claim] * len(evidence), padding=True, truncation=True, max_length=MAX_LENGTH,
                          return_tensors="pt")
        with torch.no_grad():
            pairs = model(**batch).logits.double()
        deciding = 1 - torch.softmax(pairs, dim=-1)[:, 1]
        alone = runtime.run_batch([made[row]])[0]
        for output in (alone, together):
            np.testing.assert_allclose(output.logits[row if output is together else 0],
                                       pairs[int(deciding.argmax())].numpy(), atol=TOLERANCE, rtol=0)
            assert output.per_text[row if output is together else 0] == pytest.approx(
                (deciding / deciding.sum()).tolist(), abs=TOLERANCE)
    with pytest.raises(ImportRefused, match="means neutral"):
        map_labels("verification", ["entailment", "contradiction"])


def test_attserve_configs_are_written_as_before():
    """The first kind's config.json carries no `kind` nor `transformers` (export's output is as
    before the second kind), and reads as kind attserve."""
    shipped = Path(__file__).resolve().parents[2] / "model_repository" / "bbc-act"
    config = load_bundle(shipped).config
    written = json.loads(config.model_dump_json(indent=2))
    assert config.kind == "attserve" and set(written) == set(json.loads((shipped / "config.json").read_text()))


def test_import_runs_without_torch(imported, tmp_path):
    """The command needs onnxruntime and tokenizers only (the serving install): without torch
    it imports the folder, says the parity was not checked, and the bundle serves."""
    import subprocess
    import sys

    export, _ = imported["roberta"]
    out = tmp_path / "no-torch"
    code = ("import sys; sys.modules['torch'] = None; sys.argv = ['attserve', *sys.argv[1:]]; "
            "from cli.main import app; app()")
    done = subprocess.run([sys.executable, "-c", code, "bundle", "import-hf", str(export), "--task", "entailment",
                           "-o", str(out)], cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "parity: not checked (torch is not installed)" in done.stdout
    assert load_bundle(out).config.parity is None and ModelRuntime.load(out, [CPU], 1).config.kind == "transformers"


def test_parity_refuses_weights_the_graph_does_not_match(imported, tmp_path):
    """--reference to other weights of the same model: the served logits differ from its
    forward, the import is refused with exit 2 and the bundle it would replace stays as it was."""
    from typer.testing import CliRunner

    from cli.main import app

    export, bundle = imported["bert"]
    model, _ = reference(export)
    with torch.no_grad():
        model.classifier.bias += 0.5
    model.save_pretrained(tmp_path / "other-weights")
    out = shutil.copytree(bundle, tmp_path / "repository" / "bert-nli")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    typed = CliRunner().invoke(app, ["bundle", "import-hf", str(export), "--task", "entailment", "-o", str(out),
                                     "--reference", str(tmp_path / "other-weights"), "--force"])
    assert typed.exit_code == 2 and "differ from transformers' forward by 5.00e-01" in typed.output, typed.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["bert-nli"]  # no staging folder left


def test_int8_import_records_the_score_difference_it_measured(imported, tmp_path):
    """--int8 --dev FILE: the bundle's graph is int8 (smaller, another checksum), it loads and
    answers, and its metrics.int8 holds the largest |score - fp32 score| on the dev inputs as one
    batch, recomputed here from the fp32 bundle, plus a timing of each."""
    from typer.testing import CliRunner

    from cli.main import app
    from service.inference.runtime import softmax

    export, fp32 = imported["bert"]
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps({"premise": a, "hypothesis": b}) + "\n" for a, b in PAIRS), encoding="utf-8")
    out = tmp_path / "bert-nli-int8"
    typed = CliRunner().invoke(app, ["bundle", "import-hf", str(export), "--task", "entailment", "-o", str(out),
                                     "--int8", "--dev", str(dev)])
    assert typed.exit_code == 0, typed.output
    config = load_bundle(out).config
    report = config.metrics["int8"]
    assert report["dev"] == "dev.jsonl" and report["examples"] == len(PAIRS)
    assert (out / "model.onnx").stat().st_size < (fp32 / "model.onnx").stat().st_size
    assert config.model_sha256 != load_bundle(fp32).config.model_sha256 and config.parity is None
    scores = []
    for bundle in (fp32, out):
        runtime = ModelRuntime.load(bundle, [CPU], 1)
        logits = runtime.run_call([e.item for e in items(runtime, PAIRS)]).logits
        scores.append(softmax(logits, runtime.config.temperature))
    measured = float(np.abs(scores[1] - scores[0]).max())
    assert 0 < measured < 0.2  # int8 moves the scores, a little
    assert report["max_abs_score_diff"] == pytest.approx(measured, abs=1e-12)
    assert report["fp32_call_ms"] > 0 and report["int8_call_ms"] > 0
    assert report["speedup"] == pytest.approx(report["fp32_call_ms"] / report["int8_call_ms"], rel=1e-2)
    assert f"int8: max |score - fp32| {measured:.2e} on dev.jsonl" in typed.output


def test_int8_import_without_dev_file_says_what_it_measured_on(imported, tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    export, _ = imported["roberta"]
    out = tmp_path / "roberta-nli-int8"
    typed = CliRunner().invoke(app, ["bundle", "import-hf", str(export), "--task", "entailment", "-o", str(out), "--int8"])
    assert typed.exit_code == 0, typed.output
    report = load_bundle(out).config.metrics["int8"]
    assert report["dev"] == "the 4 parity examples (no --dev)" and report["examples"] == 4
    assert "fp32_parity_max_abs_diff" in report  # the weights were beside the export: fp32 was checked
