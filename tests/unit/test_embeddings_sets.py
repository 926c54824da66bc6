"""The vector sets beyond GloVe (issue 64): WordLlama composed from its pieces (the installed
package's real table and tokenizer), spaCy md's vocab/ files (tiny fakes in its layout), "+"
concatenations, and the embedding matrix built from them for a tiny vocabulary."""

from __future__ import annotations

import logging
import json
from pathlib import Path

import numpy as np
import pytest

import training.datasets as datasets
import training.embeddings as embeddings
from training.embeddings import (VECTOR_SETS, compose_from_pieces, embedding_matrix, load_glove, murmurhash64a, read_spacy_vectors,
                                 vector_set_parts, vectors_width, wordllama_pieces)

pytest.importorskip("wordllama")
pytest.importorskip("msgpack")

GLOVE_WORDS = ["the", ",", "cat", "sat", "a", "mitochondria", "paris", "3"]  # the fake GloVe 6B word list, frequency order


@pytest.fixture(scope="module")
def pieces():
    return wordllama_pieces()


def test_spacy_hash_is_spacys() -> None:
    # spaCy's documentation: nlp.vocab.strings["coffee"] == 3197928453018144401
    assert murmurhash64a("coffee".encode("utf-8")) == 3197928453018144401
    assert murmurhash64a(b"coffee", seed=0) != 3197928453018144401  # the seed is part of it
    # every tail length (0-7 bytes past a multiple of 8) gives a distinct 64-bit value
    values = {murmurhash64a(("x" * n).encode()) for n in range(17)}
    assert len(values) == 17 and all(0 <= v < 2**64 for v in values)


def fake_spacy_vocab(folder: Path, rows: np.ndarray, keys: dict[str, int], extra_strings: list[str]) -> None:
    """A spaCy vocab/ folder: `vectors` (.npy), `key2row` (msgpack {hash: row}), `strings.json`."""
    import msgpack

    folder.mkdir(parents=True)
    with open(folder / "vectors", "wb") as fh:  # spaCy saves through a file handle: no .npy suffix
        np.save(fh, rows)
    (folder / "key2row").write_bytes(msgpack.packb({murmurhash64a(s.encode("utf-8")): row for s, row in keys.items()}))
    (folder / "strings.json").write_text(json.dumps([*keys, *extra_strings]), encoding="utf-8")


SPACY_ROWS = np.arange(4 * 6, dtype=np.float32).reshape(4, 6) / 10.0  # 4 distinct vectors, 6-d
# "Paris" only capitalised; "Cat" and "cat" both (the lower-case key wins); "dog" and "hound" share row 3
SPACY_KEYS = {"Paris": 0, "Cat": 1, "cat": 2, "dog": 3, "hound": 3, "sat": 1}


def test_read_spacy_vectors(tmp_path: Path) -> None:
    fake_spacy_vocab(tmp_path / "vocab", SPACY_ROWS, SPACY_KEYS, extra_strings=["unkeyed", "\t"])
    words, vectors = read_spacy_vectors(tmp_path / "vocab")
    assert sorted(words) == ["cat", "dog", "hound", "paris", "sat"]  # lower case only; strings without a key dropped
    assert vectors.shape == (5, 6) and vectors.dtype == np.float32
    row = dict(zip(words, vectors))
    for word, source_row in {"paris": 0, "cat": 2, "dog": 3, "hound": 3, "sat": 1}.items():
        assert np.array_equal(row[word], SPACY_ROWS[source_row]), word

    (tmp_path / "other").mkdir()
    fake_spacy_vocab(tmp_path / "other" / "vocab", SPACY_ROWS, {}, extra_strings=["cat"])
    with pytest.raises(ValueError, match="no string"):
        read_spacy_vectors(tmp_path / "other" / "vocab")


def test_compose_mean_and_first_piece(pieces) -> None:
    table, tokenizer = pieces
    assert table.shape == (32000, 256)
    words = ["the", "mitochondria", "3", "coster-waldau"]
    ids = [tokenizer.encode(w, add_special_tokens=False).ids for w in words]
    assert len(ids[0]) == 1 and len(ids[1]) > 2  # one word of one piece, one of several
    mean = compose_from_pieces(words, table, tokenizer, "mean")
    first = compose_from_pieces(words, table, tokenizer, "first")
    assert mean.shape == first.shape == (4, 256) and mean.dtype == np.float32
    assert np.array_equal(mean[0], table[ids[0][0]]) and np.array_equal(first[0], table[ids[0][0]])
    for i, word_ids in enumerate(ids):
        np.testing.assert_allclose(mean[i], table[word_ids].mean(axis=0), rtol=1e-5, atol=1e-6)
        assert np.array_equal(first[i], table[word_ids[0]])
    assert not np.allclose(mean[1], first[1])
    with pytest.raises(ValueError, match="'mean' or 'first'"):
        compose_from_pieces(words, table, tokenizer, "max")


def test_a_words_vector_does_not_depend_on_the_other_words(pieces) -> None:
    """WordLlama's tokenizer config pads a batch to its longest word: pad pieces must not join
    the mean (wordllama_pieces turns the padding off)."""
    table, tokenizer = pieces
    alone = compose_from_pieces(["cat"], table, tokenizer)
    batched = compose_from_pieces(["cat", "antidisestablishmentarianism", "supercalifragilistic"], table, tokenizer)
    assert np.array_equal(alone[0], batched[0])
    assert np.array_equal(alone[0], table[tokenizer.encode("cat", add_special_tokens=False).ids[0]])


@pytest.fixture
def fake_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    """glove-6b-50d (4-d here), glove-6b-100d (3-d, no "a", "3", "mitochondria") and spacy-md-300
    (6-d) as tiny fakes in their packages' layouts; WordLlama is the installed package."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    glove = np.arange(len(GLOVE_WORDS) * 4, dtype=np.float32).reshape(-1, 4) + 1.0
    kumo = tmp_path / "glove" / embeddings.GLOVE_DIR
    kumo.mkdir(parents=True)
    np.save(kumo / embeddings.GLOVE_VECTORS, glove)
    pq.write_table(pa.table({"index": GLOVE_WORDS}), kumo / embeddings.GLOVE_WORDS)

    wink_words = ["the", ",", "cat", "sat", "paris"]
    wink = -np.arange(len(wink_words) * 3, dtype=np.float64).reshape(-1, 3) / 4.0
    table = {w: [*row, float(np.linalg.norm(row)), i] for i, (w, row) in enumerate(zip(wink_words, wink))}
    doc = {"l2NormIndex": 3, "wordIndex": 4, "size": len(wink_words), "dimensions": 3, "words": wink_words, "vectors": table}
    (tmp_path / "glove-100d" / "package").mkdir(parents=True)
    (tmp_path / "glove-100d" / embeddings.WINK_JSON).write_text(json.dumps(doc), encoding="utf-8")

    fake_spacy_vocab(tmp_path / "spacy-md" / embeddings.SPACY_VOCAB, SPACY_ROWS, SPACY_KEYS, extra_strings=[])
    monkeypatch.setattr(datasets, "verified_data", lambda name, cache_dir=None: (tmp_path / name, {}))
    return {"glove": glove, "wink": wink.astype(np.float32), "wink_words": wink_words}


def test_each_set_on_tiny_sources(fake_sources, pieces) -> None:
    table, tokenizer = pieces
    words, vectors = load_glove(None, "wordllama-256")  # composed for GloVe's words, in GloVe's order
    assert words == GLOVE_WORDS and vectors.shape == (len(GLOVE_WORDS), 256)
    assert np.array_equal(vectors, compose_from_pieces(GLOVE_WORDS, table, tokenizer))
    first_words, first = load_glove(None, "wordllama-256-first")
    assert first_words == GLOVE_WORDS and np.array_equal(first, compose_from_pieces(GLOVE_WORDS, table, tokenizer, "first"))
    scaled_words, scaled = load_glove(None, "wordllama-256-scaled")  # the means, one factor to GloVe 100d's mean norm
    assert scaled_words == GLOVE_WORDS
    assert np.linalg.norm(scaled, axis=1).mean() == pytest.approx(embeddings.GLOVE_100D_MEAN_NORM, rel=1e-5)
    factor = scaled / vectors
    assert np.allclose(factor, factor.flat[0], rtol=1e-5) and factor.flat[0] != pytest.approx(1.0)

    random_words, random = load_glove(None, "random-256")  # the control: no content, WordLlama's width and scale
    assert random_words == GLOVE_WORDS and random.shape == (len(GLOVE_WORDS), 256) and random.dtype == np.float32
    assert np.linalg.norm(random, axis=1).mean() == pytest.approx(embeddings.WORDLLAMA_MEAN_NORM, rel=1e-5)
    assert np.array_equal(random, load_glove(None, "random-256")[1])  # the same rows on every load
    assert not np.allclose(random, vectors)

    words, vectors = load_glove(None, "spacy-md-300")  # GloVe's words first, in its order, then spaCy's others
    assert words == ["cat", "sat", "paris", "dog", "hound"] and vectors.shape == (5, 6)
    assert np.array_equal(vectors, SPACY_ROWS[[2, 1, 0, 3, 3]])


def test_concatenation_order_and_words(fake_sources, pieces) -> None:
    table, tokenizer = pieces
    wink_words, wink = fake_sources["wink_words"], fake_sources["wink"]

    words, vectors = load_glove(None, "glove-6b-100d+wordllama-256")  # a composed set covers every word
    assert words == wink_words and vectors.shape == (5, 3 + 256)
    assert np.array_equal(vectors[:, :3], wink) and np.array_equal(vectors[:, 3:], compose_from_pieces(wink_words, table, tokenizer))

    words, vectors = load_glove(None, "wordllama-256+glove-6b-100d")  # the first set's words and order, its columns first
    assert words == wink_words and np.array_equal(vectors[:, 256:], wink) and np.array_equal(vectors[:, :256], compose_from_pieces(wink_words, table, tokenizer))

    words, vectors = load_glove(None, "glove-6b-50d+spacy-md-300")  # two read sets: the words both have
    assert words == ["cat", "sat", "paris"] and vectors.shape == (3, 4 + 6)
    glove = fake_sources["glove"]
    assert np.array_equal(vectors[:, :4], glove[[2, 3, 6]]) and np.array_equal(vectors[:, 4:], SPACY_ROWS[[2, 1, 0]])


def test_embedding_matrix_from_a_concatenated_set(fake_sources, pieces) -> None:
    table, tokenizer = pieces
    words, vectors = load_glove(None, "glove-6b-100d+wordllama-256")
    vocab = {"[PAD]": 0, "[UNK]": 1, "cat": 2, "zyzzyva": 3, "paris": 4}
    matrix, coverage = embedding_matrix(vocab, words, vectors, seed=0, oov_scale=0.05)
    assert matrix.shape == (5, 259) and coverage == pytest.approx(2 / 4)
    assert np.array_equal(matrix[0], np.zeros(259, np.float32))
    assert np.array_equal(matrix[2, :3], fake_sources["wink"][2]) and np.array_equal(matrix[4], vectors[4])
    assert np.array_equal(matrix[2, 3:], compose_from_pieces(["cat"], table, tokenizer)[0])
    for unknown in (1, 3):  # as with GloVe alone: a small random row, not a composed one
        assert 0 < np.abs(matrix[unknown]).max() < 0.05 * 6


def test_every_set_states_its_licence(fake_sources, pieces, caplog) -> None:
    assert all(spec.licence for spec in VECTOR_SETS.values())
    assert "Llama 2 Community License" in VECTOR_SETS["wordllama-256"].licence and "PDDL" in VECTOR_SETS["glove-6b-100d"].licence
    with caplog.at_level(logging.INFO, logger="training.embeddings"):
        load_glove(None, "glove-6b-100d+wordllama-256")
    (record,) = [r for r in caplog.records if r.getMessage().startswith("loaded vectors")]
    assert record.licences == {name: VECTOR_SETS[name].licence for name in ("glove-6b-100d", "wordllama-256")}


def test_vector_set_names() -> None:
    assert vector_set_parts("glove-6b-100d+wordllama-256") == ["glove-6b-100d", "wordllama-256"]
    assert vectors_width("glove-6b-100d+wordllama-256") == 356 and vectors_width("spacy-md-300") == 300
    assert vectors_width("glove-6b-100d+random-256") == vectors_width("glove-6b-100d+wordllama-256")
    for bad in ("glove-6b-300d", "glove-6b-50d+glove-6b-50d", "glove-6b-50d+", "wordllama"):
        with pytest.raises(ValueError, match="unknown vectors"):
            vector_set_parts(bad)


def test_recipe_takes_the_set_names() -> None:
    from pydantic import ValidationError

    from training.recipes import EmbeddingsSection

    assert EmbeddingsSection(vectors="glove-6b-100d+wordllama-256").vectors == "glove-6b-100d+wordllama-256"
    with pytest.raises(ValidationError, match="spacy-md-300"):  # the message lists the known sets
        EmbeddingsSection(vectors="spacy-lg")


def test_train_speed_puts_a_vector_set_into_a_recipe() -> None:
    from bench.train_speed import with_vectors
    from training.recipes import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "paraphrase-attconv.toml")
    wider = with_vectors(recipe, "glove-6b-100d+wordllama-256")
    assert wider.embeddings.vectors == "glove-6b-100d+wordllama-256" and wider.model.overrides["embedding_dim"] == 356
    before, after = recipe.model_dump(), wider.model_dump()
    for fields in (before, after):  # nothing else changes
        fields["embeddings"].pop("vectors"), fields["model"].pop("embedding_dim")
    assert before == after
    with pytest.raises(ValueError, match="unknown vectors"):
        with_vectors(recipe, "glove-6b-300d")
