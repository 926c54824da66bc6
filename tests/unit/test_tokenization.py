"""The one tokenizer file: built by training, read by the service, identical ids both ways."""

import json

import numpy as np
import pytest

from core.bundle import BundleConfig, BundleError, read_config
from core.tokenization import PAD_ID, TextEncoder, pad_2d, pad_3d
from training.tokenizer import build_tokenizer, save_tokenizer

CORPUS = ["A man plays a guitar.", "Two dogs run, in the park!", "The man isn't sleeping."]


@pytest.fixture()
def encoder(tmp_path):
    path = save_tokenizer(build_tokenizer(CORPUS * 2, min_frequency=2), tmp_path / "tokenizer.json")
    return TextEncoder.from_file(path)


def test_round_trip_through_file_lowercases_and_splits_punctuation(encoder, tmp_path):
    assert encoder.tokenizer.token_to_id("[PAD]") == PAD_ID
    assert encoder.tokenizer.token_to_id("[UNK]") == 1
    assert encoder.tokens("The MAN plays, a Zebra!") == ["the", "man", "plays", ",", "a", "[UNK]", "!"]
    again = TextEncoder.from_file(tmp_path / "tokenizer.json")
    assert again.encode(CORPUS, 50).ids == encoder.encode(CORPUS, 50).ids
    assert all(i > 1 for row in encoder.encode(CORPUS, 50).ids for i in row)  # all known words


def test_min_frequency_sends_rare_words_to_unk(tmp_path):
    tok = build_tokenizer(["common common rare"], min_frequency=2)
    enc = TextEncoder(tok)
    assert enc.tokens("common rare") == ["common", "[UNK]"]


def test_truncation_is_reported_per_text(encoder):
    out = encoder.encode(["a man plays a guitar", "a man"], max_length=3)
    assert out.lengths == [3, 2]
    assert out.truncated == [True, False]


def test_padding_shapes_and_pad_id():
    two = pad_2d([[4, 5, 6], [7]])
    assert two.dtype == np.int64 and two.tolist() == [[4, 5, 6], [7, 0, 0]]
    assert pad_2d([[], []]).shape == (2, 1)  # never an empty length axis
    three = pad_3d([[[4, 5], [6]], [[7, 8, 9]]])
    assert three.shape == (2, 2, 3)
    assert three[1, 1].tolist() == [0, 0, 0]  # missing evidence slot is all padding


def test_tokenizer_with_wrong_pad_id_is_refused():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tok = Tokenizer(WordLevel({"[UNK]": 0, "[PAD]": 1}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="PAD"):
        TextEncoder(tok)


def test_bundle_config_rejects_inputs_that_do_not_fit_the_task(tmp_path):
    good = {
        "name": "snli-test", "version": "1", "task": "entailment", "architecture": "abcnn-3",
        "labels": ["entailment", "neutral", "contradiction"],
        "inputs": ["premise_ids", "hypothesis_ids"], "outputs": ["logits"],
        "max_lengths": {"premise_ids": 64, "hypothesis_ids": 64},
        "opset": 18, "onnx_version": "1", "onnxruntime_version": "1",
        "model_sha256": "0" * 64, "tokenizer_sha256": "1" * 64,
    }
    BundleConfig.model_validate(good)
    bad = dict(good, inputs=["input_ids"])
    (tmp_path / "config.json").write_text(json.dumps(bad))
    with pytest.raises(BundleError, match="config.json"):
        read_config(tmp_path / "config.json")
    with pytest.raises(ValueError, match="max_evidence"):
        BundleConfig.model_validate(dict(good, task="verification", inputs=["claim_ids", "evidence_ids"],
                                         outputs=["logits", "evidence_scores"],
                                         max_lengths={"claim_ids": 5, "evidence_ids": 5}))


def test_training_and_the_service_encode_through_one_function(encoder):
    """core.encoding.encode_fields is the one examples -> ids step: training's padded arrays
    (training.batching.encode_examples) and the service's per-input ids
    (service.inference.tasks.token_ids) come from it, so for the same texts they hold the same ids."""
    from types import SimpleNamespace

    from core.encoding import encode_fields
    from core.tasks import TASKS
    from service.inference.tasks import token_ids
    from training.batching import encode_examples
    from training.examples import ClaimExample, PairExample, TextExample

    lengths = {"input_ids": 6, "premise_ids": 6, "hypothesis_ids": 4, "claim_ids": 5, "evidence_ids": 4}
    claims = [ClaimExample("the cat sat", ("the cat sat on the mat today", "a dog", "extra"), "SUPPORTS"),
              ClaimExample("a dog ran", ("the dog ran",), "REFUTES")]
    fields = encode_fields(encoder, TASKS["verification"], claims, lengths, max_texts=2)
    assert [f.field.name for f in fields] == ["claim", "evidence"]
    assert fields[1].counts == [2, 1] and fields[1].spans() == [(0, 2), (2, 3)]
    assert fields[1].encoded.cut[0] == 3  # 7 tokens cut to 4

    def runtime_for(task: str) -> SimpleNamespace:  # what token_ids reads of a runtime
        return SimpleNamespace(encoder=encoder, config=SimpleNamespace(task=task, max_lengths=lengths))

    for task, examples in (("verification", claims),
                           ("entailment", [PairExample("a cat sat on the mat", "a cat", "entailment"),
                                           PairExample("dogs", "a dog ran far away today", "neutral")]),
                           ("classification", [TextExample("the mat", "x"), TextExample("a cat sat", "y")])):
        arrays = encode_examples(encoder, examples, lengths, max_evidence=2, task=task)
        served = token_ids(runtime_for(task), examples if task != "verification" else
                           [SimpleNamespace(claim=e.claim, evidence=e.evidence[:2]) for e in examples])
        for i, (row, _, _, _) in enumerate(served):
            for array, ids in zip(arrays, row, strict=True):
                if array.ndim == 3:  # (B, K, L): each text's ids, then padding
                    assert [list(array[i, k, : len(t)]) for k, t in enumerate(ids)] == ids
                    assert not array[i, len(ids):].any()
                else:
                    assert list(array[i, : len(ids)]) == ids and not array[i, len(ids):].any()
