"""Vocabulary over pretrained vectors: pretrained words in the tokenizer, hash buckets for the
rest, frozen pretrained rows in training, fp16 tables in the exported graph."""

from __future__ import annotations

import json
import zlib

import numpy as np
import onnx
import pytest
import torch

from core.tokenization import PAD_ID, TextEncoder, oov_token
from training.tokenizer import build_tokenizer, producible, save_tokenizer, trainable_rows

TRAIN = ["the cat sat on the mat", "the dog sat", "a cat ran"]
GLOVE_WORDS = ["the", ",", "u.s.", "'s", "zebra", "giraffe", "cat", "house", "river"]


def test_pretrained_words_join_the_training_words_in_order():
    tokenizer = build_tokenizer(TRAIN, pretrained_words=GLOVE_WORDS, max_pretrained=3, oov_buckets=4)
    vocab = tokenizer.get_vocab()
    assert vocab["[PAD]"] == 0 and vocab["[UNK]"] == 1
    trained = build_tokenizer(TRAIN).get_vocab()
    assert all(vocab[word] == index for word, index in trained.items())  # training ids unchanged
    # "u.s." and "'s" cannot come out of the pre-tokeniser; "the" and "cat" are already there
    added = sorted((vocab[w], w) for w in vocab if w not in trained and not w.startswith("[OOV"))
    assert [w for _, w in added] == [",", "zebra", "giraffe"]
    # buckets right after the training words: ids below trainable_rows are all training can see
    assert [vocab[oov_token(i)] for i in range(4)] == list(range(len(trained), len(trained) + 4))
    assert trainable_rows(tokenizer) == len(trained) + 4 == added[0][0]


def test_producible_rejects_tokens_the_pre_tokenizer_splits():
    tokenizer = build_tokenizer(TRAIN)
    assert producible(tokenizer, "zebra") and producible(tokenizer, ",")
    assert not producible(tokenizer, "u.s.") and not producible(tokenizer, "'s") and not producible(tokenizer, "Zebra")


def test_special_tokens_typed_in_a_text_are_never_the_padding_id(tmp_path):
    path = save_tokenizer(build_tokenizer(TRAIN, pretrained_words=GLOVE_WORDS, max_pretrained=5, oov_buckets=8), tmp_path / "t.json")
    encoder = TextEncoder.from_file(path)
    ids = encoder.encode(["the [PAD] cat [UNK]"], 32).ids[0]
    assert PAD_ID not in ids and len(ids) == 8


def test_unknown_words_hash_to_their_own_bucket_across_case_and_batches(tmp_path):
    buckets = 64
    path = save_tokenizer(build_tokenizer(TRAIN, pretrained_words=GLOVE_WORDS, max_pretrained=5, oov_buckets=buckets), tmp_path / "t.json")
    encoder = TextEncoder.from_file(path)  # the file round trip keeps the buckets
    assert encoder.oov_buckets == buckets
    base = encoder.oov_base
    solo = encoder.encode(["Qwerty zebra qwerty"], 32).ids[0]
    batch = encoder.encode(["cat", "Qwerty zebra qwerty", "xyzzy " * 1000], 32).ids[1]  # encode_batch path
    assert solo == batch
    # a batch is encoded without offsets, and again with them only for its texts with an
    # unknown word (the hash needs the word); explanations take the offsets of every text
    texts = ["cat sat", "Qwerty zebra qwerty", "the mat", "a qwerty cat"]
    plain, described = encoder.encode(texts, 32), encoder.encode(texts, 32, describe=[True] * 4)
    assert plain.ids == described.ids == [encoder.encode([t], 32).ids[0] for t in texts]
    long_text = "qwerty " * 500  # one text over SHORT_TEXT_CHARS also goes without offsets first
    assert encoder.encode([long_text], 4).ids[0] == [base + zlib.crc32("qwerty".encode()) % buckets] * 4
    expected = base + zlib.crc32("qwerty".encode()) % buckets  # the documented rule
    assert solo[0] == solo[2] == expected
    assert solo[1] == encoder.tokenizer.token_to_id("zebra")  # a pretrained word keeps its own id
    # different unknown words spread over the buckets instead of collapsing into [UNK]
    words = [f"unseenword{i}" for i in range(200)]
    ids = [encoder.encode([w], 8).ids[0][0] for w in words]
    assert encoder.unk_id not in ids
    assert all(base <= i < base + buckets for i in ids)
    assert len(set(ids)) > buckets // 2
    assert set(encoder.unknown_ids()) == {encoder.unk_id, *range(base, base + buckets)}


def test_a_tokenizer_without_buckets_keeps_plain_unk():
    encoder = TextEncoder(build_tokenizer(TRAIN))
    assert encoder.oov_buckets == 0 and encoder.unknown_ids() == [encoder.unk_id]
    assert encoder.encode(["qwerty cat"], 8).ids[0][0] == encoder.unk_id


def test_non_contiguous_bucket_tokens_are_rejected():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {"[PAD]": 0, "[UNK]": 1, oov_token(0): 2, "cat": 3, oov_token(1): 4}
    with pytest.raises(ValueError, match="not contiguous"):
        TextEncoder(Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]")))


def test_penn_treebank_bracket_escapes_become_brackets():
    tokenizer = build_tokenizer(["a ( b ) c [ d ]"])
    encoding = tokenizer.encode("Paris -LRB- France -RRB- -LSB- 1 -RSB-")
    assert encoding.tokens[1] == "(" and encoding.tokens[3] == ")" and encoding.tokens[4] == "["
    assert tokenizer.encode("x -LRB- y").tokens == tokenizer.encode("x ( y").tokens


# ---------------------------------------------------------------------------------------------
# Training: frozen pretrained rows, trained buckets


WORDS = ["the", "dog", "good", "bad", "zebra", "quokka"]  # the last two never occur in the data


def _train_on_fake_glove(out, monkeypatch, pretrained_vocab: int, epochs: int):
    """A classifier trained on test_trainer's tiny data with WORDS as the pretrained vectors
    (frozen rows, 16 buckets, no training word): (splits, vectors)."""
    import training.embeddings
    from tests.unit.test_trainer import make_recipe, make_splits
    from training.trainer import TrainOptions, train

    splits = make_splits("classification")
    vectors = np.random.default_rng(0).normal(size=(len(WORDS), 8)).astype(np.float32)
    monkeypatch.setattr(training.embeddings, "load_glove", lambda cache_dir=None, vectors_name=None, **_: (WORDS, vectors))
    base = make_recipe("classification", epochs=epochs)
    recipe = base.model_copy(update={
        "tokenizer": base.tokenizer.model_copy(update={"min_frequency": 1000, "pretrained_vocab": pretrained_vocab, "oov_buckets": 16}),
        "embeddings": base.embeddings.model_copy(update={"glove": True, "trainable": True, "freeze_pretrained": True}),
    })
    train(recipe, out, TrainOptions(progress=False, threads=1, splits=splits))
    return splits, vectors


def test_frozen_pretrained_rows_stay_and_the_rest_trains(tmp_path, monkeypatch):
    import training.embeddings
    from training.checkpoint import load_checkpoint

    words = WORDS
    splits, vectors = _train_on_fake_glove(tmp_path, monkeypatch, pretrained_vocab=4, epochs=3)

    network, meta = load_checkpoint(tmp_path)
    encoder = TextEncoder.from_file(tmp_path / "tokenizer.json")
    vocab = encoder.tokenizer.get_vocab()
    table = network.embedding_layers()[0].weight.detach()
    # min_frequency 1000: no training word; 16 buckets, then the first 4 pretrained words
    assert sorted(vocab, key=vocab.get)[18:22] == words[:4]
    for word in words[:4]:
        assert torch.equal(table[vocab[word]], torch.from_numpy(vectors[words.index(word)]))
    # the data's words all hash into buckets: the buckets the data used moved from their init
    used = {i for ids in encoder.encode([e.text for e in splits.train], 64).ids for i in ids} & set(range(encoder.oov_base, encoder.oov_base + 16))
    assert used
    initial = training.embeddings.embedding_matrix(vocab, words, vectors, seed=0, oov_scale=float(vectors.std())).matrix
    assert all(not np.allclose(table[i].numpy(), initial[i]) for i in used)
    assert meta.recipe["tokenizer"]["oov_buckets"] == 16


def test_cut_pretrained_words_keeps_every_kept_word_and_sends_the_rest_to_buckets(tmp_path, monkeypatch):
    """training.checkpoint.cut_pretrained_words (attserve export --pretrained-vocab): the vocabulary
    and the static table lose their last pretrained-only words; a text of kept words gets the same
    logits as before, a cut word now gets its hash bucket's id."""
    from training.checkpoint import cut_pretrained_words, load_checkpoint

    _train_on_fake_glove(tmp_path / "full", monkeypatch, pretrained_vocab=6, epochs=1)
    cut_pretrained_words(tmp_path / "full", 4, tmp_path / "cut")
    with pytest.raises(ValueError, match="cannot keep"):
        cut_pretrained_words(tmp_path / "full", 6, tmp_path / "none")

    (full, _), (cut, meta) = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "cut")
    full_encoder, cut_encoder = (TextEncoder.from_file(tmp_path / d / "tokenizer.json") for d in ("full", "cut"))
    assert cut_encoder.tokenizer.get_vocab_size() == full_encoder.tokenizer.get_vocab_size() - 2 == meta.network["config"]["vocab_size"]
    assert cut.embedding_layers()[0].weight.shape[0] == full.embedding_layers()[0].weight.shape[0] - 2
    kept = full_encoder.encode(["the dog good bad"], 16).ids
    assert cut_encoder.encode(["the dog good bad"], 16).ids == kept
    ids = torch.tensor(kept, dtype=torch.int64)
    with torch.no_grad():
        assert torch.equal(full.logits_from_ids(ids), cut.logits_from_ids(ids))
    zebra = cut_encoder.encode(["zebra"], 4).ids[0][0]
    assert cut_encoder.oov_base <= zebra < cut_encoder.oov_base + 16  # cut: its bucket now
    assert full_encoder.encode(["zebra"], 4).ids[0][0] == full_encoder.tokenizer.token_to_id("zebra")


def test_freezing_needs_vectors_and_no_weight_decay():
    from tests.unit.test_trainer import make_recipe
    from training.recipes import Recipe

    payload = make_recipe("classification").model_dump()
    with pytest.raises(ValueError, match="freeze_pretrained needs glove"):
        Recipe.model_validate({**payload, "embeddings": {"glove": False, "freeze_pretrained": True}})
    with pytest.raises(ValueError, match="weight_decay"):
        Recipe.model_validate({**payload, "embeddings": {"glove": True, "freeze_pretrained": True},
                               "train": {**payload["train"], "weight_decay": 0.01}})
    with pytest.raises(ValueError, match="pretrained_vocab needs"):
        Recipe.model_validate({**payload, "tokenizer": {"pretrained_vocab": 10}})


# ---------------------------------------------------------------------------------------------
# Export: fp16 tables


def assert_graph_matches(network, graph, vocab: int, also: int | None = None) -> None:
    """The entailment graph at `graph` gives `network`'s logits (the network holds the same rounded
    weights) on padded random ids; `also`: an id the batch must read."""
    from export.parity import cpu_session, run_onnx, run_torch

    rng = np.random.default_rng(1)
    premise = rng.integers(1, vocab, size=(4, 11))
    premise[0, 7:] = PAD_ID
    if also is not None:
        premise[1, 2] = also
    hypothesis = rng.integers(1, vocab, size=(4, 5))
    hypothesis[2, 3:] = PAD_ID
    ids = [premise.astype(np.int64), hypothesis.astype(np.int64)]
    expected = run_torch(network, ids)[0]
    got = run_onnx(cpu_session(graph), "entailment", ids)[0]
    assert np.abs(expected - got).max() < 1e-5


def test_fp16_embedding_tables_halve_the_graph_and_keep_parity(tmp_path):
    from export.onnx_graph import export_onnx, round_embeddings, store_embeddings
    from models import build_network

    torch.manual_seed(0)
    vocab = 5000
    network = build_network("attconv-light", task="entailment", vocab_size=vocab, num_labels=3,
                            embedding_dim=16, hidden_dim=8, head_hidden=8, dropout=0.0).eval()
    plain = export_onnx(network, tmp_path / "plain.onnx")
    shapes = round_embeddings(network, "float16")
    assert shapes == [(vocab, 16)]
    half = export_onnx(network, tmp_path / "half.onnx")
    assert store_embeddings(half, shapes, "float16") == 1

    model = onnx.load(str(half))
    tables = [i for i in model.graph.initializer if list(i.dims) == [vocab, 16]]
    assert [t.data_type for t in tables] == [onnx.TensorProto.FLOAT16]
    assert half.stat().st_size < 0.6 * plain.stat().st_size

    assert_graph_matches(network, half, vocab)


def test_int8_embedding_tables_quarter_the_table_and_keep_parity(tmp_path):
    from export.onnx_graph import INT8_MAX, export_onnx, round_embeddings, store_embeddings
    from export.rewrite.to_checkpoint import bundle_weights
    from models import build_network

    torch.manual_seed(0)
    vocab = 5000
    network = build_network("attconv-light", task="entailment", vocab_size=vocab, num_labels=3,
                            embedding_dim=16, hidden_dim=8, head_hidden=8, dropout=0.0).eval()
    original = network.embeddings.weight.detach().clone()
    with torch.no_grad():
        network.embeddings.weight[7] = 0.0  # an all-zero row (as padding is) has no scale to divide by
    plain = export_onnx(network, tmp_path / "plain.onnx")
    assert round_embeddings(network, "int8") == [(vocab, 16)]
    rounded = network.embeddings.weight.detach()
    # each row moved by at most half a step of its own scale, its peak kept to float16 precision
    step = original.abs().amax(dim=1, keepdim=True) / INT8_MAX
    assert torch.all((rounded - original).abs()[torch.arange(vocab) != 7] <= 0.5 * step[torch.arange(vocab) != 7] * 1.01)
    assert torch.all(rounded[7] == 0)
    small = export_onnx(network, tmp_path / "int8.onnx")
    assert store_embeddings(small, [(vocab, 16)], "int8") == 1

    model = onnx.load(str(small))
    by_shape = {tuple(i.dims): i.data_type for i in model.graph.initializer if i.dims and i.dims[0] == vocab}
    assert by_shape == {(vocab, 16): onnx.TensorProto.INT8, (vocab, 1): onnx.TensorProto.FLOAT16}
    # 16 + 2 bytes a row instead of 64: the whole graph shrinks by the table's difference
    assert plain.stat().st_size - small.stat().st_size >= vocab * (64 - 18) * 0.99
    # to-checkpoint reads the int8 table back as the float32 weights the graph computes with
    assert torch.equal(bundle_weights(small)["embeddings.weight"], rounded)

    assert_graph_matches(network, small, vocab, also=7)


def test_int8_storage_refuses_a_table_that_was_not_rounded(tmp_path):
    from export.onnx_graph import export_onnx, store_embeddings
    from models import build_network

    network = build_network("attconv-light", task="entailment", vocab_size=50, num_labels=3,
                            embedding_dim=8, hidden_dim=8, head_hidden=8, dropout=0.0).eval()
    path = export_onnx(network, tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="not int8-rounded"):
        store_embeddings(path, [(50, 8)], "int8")


def test_bundle_export_honours_the_recipe_export_dtype(tmp_path):
    from export.bundle import write_bundle
    from training.checkpoint import load_checkpoint
    from tests.unit.test_export import train_checkpoint

    checkpoint = train_checkpoint("entailment", tmp_path / "c")
    config = json.loads((checkpoint / "config.json").read_text())
    config["recipe"] = {"embeddings": {"export_dtype": "float16"}}
    (checkpoint / "config.json").write_text(json.dumps(config))
    network, _ = load_checkpoint(checkpoint)
    bundle = write_bundle(checkpoint, tmp_path / "bundle")
    model = onnx.load(str(bundle / "model.onnx"))
    vocab = network.config.vocab_size
    dtypes = {i.data_type for i in model.graph.initializer if len(i.dims) == 2 and i.dims[0] == vocab}
    assert dtypes == {onnx.TensorProto.FLOAT16}
    parity = json.loads((bundle / "config.json").read_text())["parity"]
    assert parity["max_abs_diff"] < 1e-4 and parity["argmax_mismatches"] == 0


def _train_two_channel(directory, monkeypatch, unseen: list[str], pretrained_vocab: int, epochs: int):
    """A tiny two-channel AttConv trained into `directory` on synthetic pairs, its "GloVe" being
    five of the data's words then `unseen` (words the data never has), random 8-d vectors.
    Returns (the data's words, the vector words, their vectors, the recipe)."""
    import training.embeddings
    from tests.unit.test_trainer import make_splits
    from training.recipes import Recipe
    from training.trainer import TrainOptions, train

    splits = make_splits("entailment")
    train_words = sorted({w for e in splits.train for t in (e.premise, e.hypothesis) for w in t.split()})
    words = train_words[:5] + unseen
    vectors = np.random.default_rng(0).normal(size=(len(words), 8)).astype(np.float32)
    monkeypatch.setattr(training.embeddings, "load_glove", lambda cache_dir=None, **_: (words, vectors))
    recipe = Recipe.model_validate({
        "name": "tiny-two-channel", "data": {"dataset": "snli"},
        "model": {"architecture": "attconv-light", "embedding_dim": 8, "hidden_dim": 8, "head_hidden": 8, "dropout": 0.0},
        "tokenizer": {"pretrained_vocab": pretrained_vocab, "oov_buckets": 4},
        "embeddings": {"glove": True, "tuned_channel": True},
        "limits": {"max_lengths": {"premise_ids": 16, "hypothesis_ids": 16}},
        "train": {"epochs": epochs, "batch_size": 16, "lr": 0.05, "patience": None},
    })
    train(recipe, directory, TrainOptions(progress=False, threads=1, splits=splits))
    return train_words, words, vectors, recipe


def test_the_tuned_channel_trains_seen_rows_and_repeats_static_vectors_for_unseen_words(tmp_path, monkeypatch):
    from training.checkpoint import load_checkpoint
    from training.recipes import Recipe

    _, words, vectors, recipe = _train_two_channel(tmp_path, monkeypatch, ["zebra", "quokka"],
                                                   pretrained_vocab=10, epochs=2)
    network, _ = load_checkpoint(tmp_path)
    vocab = TextEncoder.from_file(tmp_path / "tokenizer.json").tokenizer.get_vocab()
    limit = network.config.tuned_vocab_size
    assert limit == vocab[oov_token(3)] + 1 and network.tuned_embeddings.num_embeddings == limit
    static = network.embeddings.weight.detach()
    for word, row in zip(words, vectors):  # the static channel is exactly the pretrained table
        assert torch.equal(static[vocab[word]], torch.from_numpy(row))
    tuned = network.tuned_embeddings.weight.detach()
    assert not torch.equal(tuned[vocab[words[0]]], static[vocab[words[0]]])  # a seen word's tuned row moved
    # an unseen pretrained word: both channels carry its pretrained vector
    network.eval()
    ids = torch.tensor([[vocab["zebra"], vocab[words[0]]]])
    embedded = network.embed(ids, ids != PAD_ID)[0]
    assert torch.equal(embedded[0], torch.cat([static[vocab["zebra"]]] * 2))
    assert torch.equal(embedded[1], torch.cat([static[vocab[words[0]]], tuned[vocab[words[0]]]]))
    with pytest.raises(ValueError, match="tuned_channel needs"):
        Recipe.model_validate({**recipe.model_dump(), "tokenizer": {"pretrained_vocab": 10, "oov_buckets": 0}})
    # left out, the buckets follow the tuned channel
    assert Recipe.model_validate({**recipe.model_dump(), "tokenizer": {"pretrained_vocab": 10}}).tokenizer.oov_buckets == 1000


def test_a_bundle_gains_pretrained_words_after_export_with_the_network_unchanged(tmp_path, monkeypatch):
    """export.rewrite.extend_vocab (`attserve bundle extend-vocab`): the next pretrained words
    join a shipped bundle; old ids, and logits on them, stay bit-identical, and a new word's
    logits are those of the PyTorch network whose static table holds that word's vector (the rows
    it would have had in training)."""
    import onnxruntime as ort

    from export.bundle import write_bundle
    from export.rewrite.extend_vocab import extend
    from training.checkpoint import load_checkpoint

    train_words, words, vectors, _ = _train_two_channel(tmp_path / "checkpoint", monkeypatch,
                                                        ["zebra", "quokka", "okapi", "ibex"], pretrained_vocab=2, epochs=1)
    bundle = write_bundle(tmp_path / "checkpoint", tmp_path / "bundle")
    old_vocab = TextEncoder.from_file(bundle / "tokenizer.json").tokenizer.get_vocab()
    assert "zebra" in old_vocab and "okapi" not in old_vocab
    old_session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    old_ids = np.array([[old_vocab["zebra"], old_vocab[train_words[0]], 1]], dtype=np.int64)
    old_logits = old_session.run(None, {"premise_ids": old_ids, "hypothesis_ids": old_ids[:, :2]})[0]

    record = extend(bundle, 4, words, vectors, "tiny")
    assert record["pretrained_words_after"] == 4 and record["vocab_size_after"] == len(old_vocab) + 2
    encoder = TextEncoder.from_file(bundle / "tokenizer.json")
    vocab = encoder.tokenizer.get_vocab()
    assert {w: vocab[w] for w in old_vocab} == old_vocab
    assert vocab["okapi"] == len(old_vocab) and vocab["ibex"] == len(old_vocab) + 1  # not a bucket
    config = json.loads((bundle / "config.json").read_text())
    assert config["parity"]["vocabulary_extended"]["pretrained_words_before"] == 2
    from core.bundle import load_bundle, sha256_file
    assert load_bundle(bundle).config.model_sha256 == sha256_file(bundle / "model.onnx")

    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    assert np.array_equal(session.run(None, {"premise_ids": old_ids, "hypothesis_ids": old_ids[:, :2]})[0], old_logits)
    ids = np.array([[vocab["okapi"], vocab[train_words[1]], vocab["ibex"]]], dtype=np.int64)
    network, _ = load_checkpoint(tmp_path / "checkpoint")
    network.embeddings = torch.nn.Embedding.from_pretrained(
        torch.cat([network.embeddings.weight.detach(), torch.from_numpy(vectors[-2:])]), freeze=True)
    with torch.no_grad():
        premise, hypothesis = torch.from_numpy(ids), torch.from_numpy(ids[:, :2])
        expected = network(premise, premise != PAD_ID, hypothesis, hypothesis != PAD_ID).numpy()
    got = session.run(None, {"premise_ids": ids, "hypothesis_ids": ids[:, :2]})[0]
    assert np.abs(got - expected).max() < 1e-5

    # refused, and nothing written, when the premise does not hold
    before = (bundle / "model.onnx").read_bytes()
    with pytest.raises(SystemExit, match="not the"):
        extend(bundle, 5, words, vectors * 2, "tiny")  # rows differ from these vectors
    with pytest.raises(SystemExit, match="not the first"):
        extend(bundle, 5, words[::-1], vectors[::-1], "tiny")  # another order
    assert (bundle / "model.onnx").read_bytes() == before


def test_a_checkpoint_starts_training_with_fewer_pretrained_words(tmp_path, monkeypatch):
    """[train] init_from with a smaller [tokenizer] pretrained_vocab: the checkpoint's vocabulary is
    cut to its first pretrained-only words (every kept word keeps its id, the rest hash into the
    buckets) and its tables to those rows; with no training (lr ~ 0) the network answers what the
    checkpoint answers on the kept words."""
    from tests.unit.test_trainer import make_splits
    from training.checkpoint import load_checkpoint
    from training.tokenizer import cut_pretrained, pretrained_count
    from training.trainer import TrainOptions, train

    unseen = ["zebra", "quokka", "okapi", "ibex"]
    train_words, _, _, recipe = _train_two_channel(tmp_path / "full", monkeypatch, unseen, pretrained_vocab=4, epochs=1)
    full = TextEncoder.from_file(tmp_path / "full" / "tokenizer.json")
    assert pretrained_count(full.tokenizer) == 4
    cut = cut_pretrained(full.tokenizer, 1)
    assert pretrained_count(cut) == 1 and cut.get_vocab_size() == full.vocab_size - 3
    assert {t: i for t, i in full.tokenizer.get_vocab().items() if t in cut.get_vocab()} == cut.get_vocab()
    encoded = [int(i) for i in TextEncoder(cut).encode(["zebra okapi okapi"], 8).ids[0]]
    assert encoded[0] == full.tokenizer.token_to_id("zebra")
    assert encoded[1] == encoded[2] and encoded[1] >= TextEncoder(cut).oov_base  # a bucket, its own

    smaller = recipe.model_copy(update={
        "tokenizer": recipe.tokenizer.model_copy(update={"pretrained_vocab": 1}),
        "train": recipe.train.model_copy(update={"lr": 1e-12, "init_from": "full"}),
    })
    tuned = train(smaller, tmp_path / "cut", TrainOptions(progress=False, threads=1, splits=make_splits("entailment"),
                  init_from=tmp_path / "full")).network
    assert TextEncoder.from_file(tmp_path / "cut" / "tokenizer.json").tokenizer.get_vocab() == cut.get_vocab()
    original, _ = load_checkpoint(tmp_path / "full")
    assert torch.equal(tuned.embeddings.weight, original.embeddings.weight[: cut.get_vocab_size()])
    vocab = cut.get_vocab()
    ids = torch.tensor([[vocab["zebra"], vocab[train_words[0]], vocab[train_words[2]]]])
    with torch.no_grad():
        assert torch.allclose(tuned.logits_from_ids(ids, ids[:, :2]), original.logits_from_ids(ids, ids[:, :2]), atol=1e-6)


def test_a_bundle_turns_back_into_the_checkpoint_it_was_exported_from(tmp_path, monkeypatch):
    """export.rewrite.to_checkpoint (`attserve bundle to-checkpoint`): every weight comes back
    (float16 tables as the float32 of their float16 values), the rebuilt checkpoint answers what
    the bundle answers, and a recipe with other sizes is refused."""
    from export.bundle import write_bundle
    from export.rewrite.to_checkpoint import convert
    from tests.unit.test_trainer import encoded_inputs, make_splits
    from training.checkpoint import load_checkpoint

    _, _, _, recipe = _train_two_channel(tmp_path / "ckpt", monkeypatch, ["zebra", "quartz"], pretrained_vocab=7, epochs=1)
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    config["recipe"]["embeddings"]["export_dtype"] = "float16"
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    original, _ = load_checkpoint(tmp_path / "ckpt")
    write_bundle(tmp_path / "ckpt", tmp_path / "bundle")

    report = convert(tmp_path / "bundle", recipe, tmp_path / "back")
    assert report["parity_max_abs_diff"] < 1e-4
    rebuilt, meta = load_checkpoint(tmp_path / "back")
    assert meta.labels == config["labels"] and meta.max_lengths == config["max_lengths"]
    before, after = original.state_dict(), rebuilt.state_dict()
    assert sorted(before) == sorted(after)
    for name in before:
        expected = before[name].half().float() if name.endswith("embeddings.weight") else before[name]
        assert torch.equal(after[name], expected), name
    pairs = make_splits("entailment").test
    with torch.no_grad():
        ids = encoded_inputs(tmp_path / "back", pairs)
        assert torch.allclose(rebuilt.logits_from_ids(*ids), original.logits_from_ids(*ids), atol=1e-2)

    wider = recipe.model_copy(update={"model": recipe.model.model_copy(update={"hidden_dim": 16})})
    with pytest.raises(RuntimeError, match="size mismatch"):
        convert(tmp_path / "bundle", wider, tmp_path / "wrong")


def test_a_checkpoint_rebuilt_from_a_cut_bundle_exports_again_under_its_recipe(tmp_path, monkeypatch):
    """The recipe's [embeddings] export_pretrained_vocab is a most: `attserve export` cuts a
    checkpoint with more pretrained-only words down to it, and exports one with no more (rebuilt
    from a bundle that was cut already, to fine-tune it) as it is, where it used to refuse."""
    from typer.testing import CliRunner

    from cli.main import app
    from export.rewrite.to_checkpoint import convert
    from training.tokenizer import pretrained_count

    unseen = ["zebra", "quartz", "okapi", "quokka", "lynx"]  # pretrained-only: the data never has them
    _, _, _, recipe = _train_two_channel(tmp_path / "ckpt", monkeypatch, unseen, pretrained_vocab=10, epochs=1)
    recipe = recipe.model_copy(update={"embeddings": recipe.embeddings.model_copy(update={"export_pretrained_vocab": 3})})
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    config["recipe"] = recipe.model_dump(mode="json")
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))

    def words_in(directory):
        return pretrained_count(TextEncoder.from_file(directory / "tokenizer.json").tokenizer)

    assert words_in(tmp_path / "ckpt") == 5
    done = CliRunner().invoke(app, ["export", str(tmp_path / "ckpt"), "--out", str(tmp_path / "cut")])
    assert done.exit_code == 0, done.output
    assert words_in(tmp_path / "cut") == 3
    convert(tmp_path / "cut", recipe, tmp_path / "back")
    assert words_in(tmp_path / "back") == 3
    done = CliRunner().invoke(app, ["export", str(tmp_path / "back"), "--out", str(tmp_path / "again")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "again" / "tokenizer.json").read_bytes() == (tmp_path / "cut" / "tokenizer.json").read_bytes()
    # an explicit --pretrained-vocab over what the checkpoint has is still an error, not a silent no-op
    done = CliRunner().invoke(app, ["export", str(tmp_path / "back"), "--out", str(tmp_path / "more"), "--pretrained-vocab", "5"])
    assert done.exit_code != 0 and "cannot keep 5" in str(done.exception)


def test_a_tuned_table_gains_words_only_when_its_rows_stayed_near_the_vectors(tmp_path):
    """--tuned-rows: a bundle with one fine-tuned table and no buckets. Refused without the flag,
    and refused when its rows moved away from the vectors; else old ids keep their logits."""
    import onnxruntime as ort

    from export.bundle import write_bundle
    from export.rewrite.extend_vocab import extend
    from export.rewrite.fp16_embeddings import random_batches, static_tables
    from tests.unit.test_export import train_checkpoint

    bundle = write_bundle(train_checkpoint("entailment", tmp_path / "c"), tmp_path / "bundle")
    vocab = TextEncoder.from_file(bundle / "tokenizer.json").tokenizer.get_vocab()
    table = onnx.numpy_helper.to_array(static_tables(onnx.load(str(bundle / "model.onnx")), len(vocab))[0])
    known = sorted(w for w in vocab if w not in ("[PAD]", "[UNK]"))
    extra = ["zebra", "quokka", "okapi"]
    words = known + extra
    near = np.concatenate([table[[vocab[w] for w in known]], np.ones((3, table.shape[1]), np.float32)])
    far = np.random.default_rng(0).normal(size=near.shape).astype(np.float32)
    config = json.loads((bundle / "config.json").read_text())
    feeds = random_batches(config, len(vocab))
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    before = [session.run(None, feed)[0] for feed in feeds]

    with pytest.raises(SystemExit, match="no \\[OOV\\] buckets"):
        extend(bundle, 2, words, near, "tiny")
    with pytest.raises(SystemExit, match="moved away"):
        extend(bundle, 2, words, far, "tiny", tuned_rows=True)
    record = extend(bundle, 2, words, near, "tiny", tuned_rows=True)
    assert record["rows"] == "tuned" and record["tuned_rows_mean_cosine"] > 0.999
    assert record["pretrained_words_before"] == 0 and record["vocab_size_after"] == len(vocab) + 2
    new_vocab = TextEncoder.from_file(bundle / "tokenizer.json").tokenizer.get_vocab()
    assert [new_vocab.get(w) for w in extra] == [len(vocab), len(vocab) + 1, None]
    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    assert all(np.array_equal(session.run(None, feed)[0], old) for feed, old in zip(feeds, before))
    table = onnx.numpy_helper.to_array(static_tables(onnx.load(str(bundle / "model.onnx")), len(new_vocab))[0])
    assert np.array_equal(table[len(vocab):], np.ones((2, table.shape[1]), np.float32))
