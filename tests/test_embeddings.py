"""GloVe loading (text format and the registry package's npy + parquet layout, on tiny fakes)
and the embedding matrix built for a tokenizer vocabulary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import training.embeddings as embeddings
from training.embeddings import embedding_matrix, load_glove, read_glove_text

WORDS = ["the", "cat", "sat", "mat", "new york"]
VECTORS = np.arange(len(WORDS) * 4, dtype=np.float32).reshape(len(WORDS), 4) + 1.0  # (5, 4), no zeros


def test_embedding_matrix_rows() -> None:
    vocab = {"[PAD]": 0, "[UNK]": 1, "the": 2, "dog": 3, "cat": 4, "mat": 5}
    matrix, coverage = embedding_matrix(vocab, WORDS, VECTORS, seed=0, oov_scale=0.05)
    assert matrix.shape == (6, 4) and matrix.dtype == np.float32
    assert np.array_equal(matrix[0], np.zeros(4, dtype=np.float32))  # pad: exact zeros
    assert np.array_equal(matrix[2], VECTORS[0]) and np.array_equal(matrix[4], VECTORS[1]) and np.array_equal(matrix[5], VECTORS[3])
    for oov in (1, 3):  # [UNK] and "dog": small random, not a copied row
        assert 0 < np.abs(matrix[oov]).max() < 0.05 * 6
    assert coverage == pytest.approx(3 / 5)  # the, cat, mat of the 5 non-pad tokens


def test_embedding_matrix_is_seeded_and_oov_rows_do_not_depend_on_other_words() -> None:
    vocab = {"[PAD]": 0, "[UNK]": 1, "cat": 2, "zebra": 3}
    first, _ = embedding_matrix(vocab, WORDS, VECTORS, seed=5)
    again, _ = embedding_matrix(vocab, WORDS, VECTORS, seed=5)
    other, _ = embedding_matrix(vocab, WORDS, VECTORS, seed=6)
    assert np.array_equal(first, again)
    assert not np.array_equal(first[3], other[3]) and np.array_equal(first[2], other[2])
    # knowing "zebra" must not change [UNK]'s random row
    with_zebra, _ = embedding_matrix(vocab, WORDS + ["zebra"], np.vstack([VECTORS, np.full((1, 4), 9.0, np.float32)]), seed=5)
    assert np.array_equal(with_zebra[1], first[1]) and np.array_equal(with_zebra[3], np.full(4, 9.0, np.float32))
    # the scale is what oov_scale says
    big = embedding_matrix({f"w{i}": i for i in range(4000)}, WORDS, VECTORS, seed=0, oov_scale=0.1).matrix
    assert big[1:].std() == pytest.approx(0.1, rel=0.05)


def test_embedding_matrix_pad_id_and_validation() -> None:
    matrix, coverage = embedding_matrix({"cat": 0, "<pad>": 1}, WORDS, VECTORS, pad_id=1)
    assert np.array_equal(matrix[1], np.zeros(4)) and np.array_equal(matrix[0], VECTORS[1]) and coverage == 1.0
    with pytest.raises(ValueError, match="0..2"):
        embedding_matrix({"[PAD]": 0, "cat": 1, "sat": 5}, WORDS, VECTORS)
    with pytest.raises(ValueError, match="do not match"):
        embedding_matrix({"[PAD]": 0}, WORDS[:2], VECTORS)


def test_read_glove_text(tmp_path: Path) -> None:
    lines = ["5 4"] + [f"{w} " + " ".join(f"{v:g}" for v in row) for w, row in zip(WORDS, VECTORS)]
    path = tmp_path / "vectors.txt"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8"))
    words, vectors = read_glove_text(path)
    assert words == WORDS  # "new york" keeps its space: the vector is the last D fields
    assert vectors.dtype == np.float32 and np.array_equal(vectors, VECTORS)
    bad = tmp_path / "bad.txt"
    bad.write_text("the 1 2 3\ncat 1 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.txt:2"):
        read_glove_text(bad)


def test_load_glove_reads_the_package_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    import training.datasets as datasets

    data = tmp_path / embeddings.GLOVE_DIR
    data.mkdir(parents=True)
    np.save(data / embeddings.GLOVE_VECTORS, VECTORS)
    pq.write_table(pa.table({"index": WORDS}), data / embeddings.GLOVE_WORDS)
    monkeypatch.setattr(datasets, "verified_data", lambda name, cache_dir=None: (tmp_path, {}))
    words, vectors = load_glove(tmp_path)
    assert words == WORDS and np.array_equal(vectors, VECTORS) and vectors.dtype == np.float32

    np.save(data / embeddings.GLOVE_VECTORS, VECTORS[:3])
    with pytest.raises(ValueError, match="do not match"):
        load_glove(tmp_path)
