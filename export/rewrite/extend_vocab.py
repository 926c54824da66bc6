"""Give an existing bundle more pretrained words, in place, without retraining it.

A bundle whose tokenizer has a vocabulary over pretrained vectors (`[tokenizer] pretrained_vocab`,
`oov_buckets`) keeps the pretrained-only words (the ids after the [OOVn] buckets) frozen in
training: their rows in the static table are the GloVe vectors, and the tuned channel repeats
them. So appending the next GloVe words, in GloVe's order, with their vectors, gives the network
exactly what it would have had for those words had they been in the vocabulary when it was
trained. The rewrite checks that premise before it writes anything:

- the bundle's pretrained-only words are the first N producible GloVe words outside the
  training words, in order (same vector set, same rule as `training.tokenizer.build_tokenizer`);
- their rows in the static table equal the GloVe vectors stored in the table's dtype, bit for bit;
- after the rewrite, logits on ids of the old vocabulary are bit-identical to before, and every
  old word still gets its old id.

Then it records what it did beside the export's parity in config.json, with the new checksums
and version. `attserve card` refreshes the card's figures afterwards.

`--tuned-rows` is for a bundle trained on its own words only (one fine-tuned table, every other
word [UNK]): there the new words' untuned vectors sit beside tuned rows, which is a new model,
not an exact extension. The rewrite measures how far tuning moved the rows from the vectors
(mean cosine; refused below MIN_TUNED_COSINE) and the card decides whether it ships.

    attserve bundle extend-vocab model_repository/snli-attconv-advanced --pretrained-vocab 100000
    attserve bundle extend-vocab model_repository/snli-verification-attconv --pretrained-vocab 20000 --tuned-rows
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from tokenizers import Tokenizer

from core.bundle import sha256_file
from core.tokenization import TextEncoder
from export.rewrite.fp16_embeddings import random_batches, static_tables
from training.tokenizer import pretrained_only


MIN_TUNED_COSINE = 0.9


def mean_cosine(rows: np.ndarray, vectors: np.ndarray) -> float:
    rows, vectors = rows.astype(np.float64), vectors.astype(np.float64)
    norms = np.linalg.norm(rows, axis=1) * np.linalg.norm(vectors, axis=1)
    return float(np.mean(np.sum(rows * vectors, axis=1) / np.maximum(norms, 1e-12)))


def _trainable_rows(bundle: Path, encoder: TextEncoder, vocab_size: int, tuned_rows: bool) -> int:
    """How many of the table's first rows training tuned: up to the [OOV] buckets, or (`tuned_rows`,
    a tokenizer without buckets) all of them; refuses a bundle the mode does not fit."""
    if encoder.oov_buckets:
        if tuned_rows:
            raise SystemExit(f"{bundle}: the tokenizer has [OOV] buckets, so its pretrained-only rows are frozen; drop --tuned-rows")
        return encoder.oov_base + encoder.oov_buckets
    if tuned_rows:
        return vocab_size
    raise SystemExit(f"{bundle}: the tokenizer has no [OOV] buckets, so no frozen pretrained-only rows to extend (--tuned-rows?)")


def _check_extended_model(bundle: Path, config: dict, model_path: Path, new_model: Path, vocab_size: int,
                          added: int) -> int:
    """Refuse the extension unless logits on ids of the old vocabulary are bit-identical to the old
    model's and ids over the whole new vocabulary give finite logits; the examples compared."""
    before = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(str(new_model), providers=["CPUExecutionProvider"])
    examples = 0
    for feed in random_batches(config, vocab_size):
        names = [config["outputs"][0]]
        if not np.array_equal(before.run(names, feed)[0], after.run(names, feed)[0]):
            raise SystemExit(f"{bundle}: logits on the old vocabulary changed; not extended")
        examples += next(iter(feed.values())).shape[0]
    for feed in random_batches(config, vocab_size + added, seed=1):  # ids over the whole new vocabulary
        if not np.isfinite(after.run(None, feed)[0]).all():
            raise SystemExit(f"{bundle}: the new ids give non-finite logits")
    return examples


def _write_config(bundle: Path, config: dict, old_sha: str, record: dict) -> None:
    """config.json after the rewrite: the new checksums, a version that follows the model's
    checksum if it did before, and `record` beside the export's parity."""
    config["model_sha256"] = sha256_file(bundle / "model.onnx")
    config["tokenizer_sha256"] = sha256_file(bundle / "tokenizer.json")
    if config["version"] == old_sha[:12]:
        config["version"] = config["model_sha256"][:12]
    config["parity"]["vocabulary_extended"] = record
    (bundle / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def extend(bundle: Path, pretrained_vocab: int, words: list[str], matrix: np.ndarray, vectors: str,
           tuned_rows: bool = False) -> dict:
    """Append pretrained words up to `pretrained_vocab` pretrained-only words in all, from the
    vector set `vectors` (its `words` and (N, D) `matrix`, as `load_glove` returns them).

    `tuned_rows`: for a bundle with one fine-tuned table and no buckets (trained on its own
    words only, every other word [UNK]). The new words get the untuned vectors beside tuned ones,
    so this is a change of model, not an exact extension: it is refused unless the tuned rows
    stayed close to the vectors (mean cosine >= MIN_TUNED_COSINE), and it is worth shipping only
    when `attserve card` says so (see the README)."""
    config_path = bundle / "config.json"
    config = json.loads(config_path.read_text())
    tokenizer_path, model_path = bundle / "tokenizer.json", bundle / "model.onnx"
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    encoder = TextEncoder(tokenizer)
    vocab = tokenizer.get_vocab()
    by_id = sorted(vocab, key=vocab.__getitem__)
    trainable = _trainable_rows(bundle, encoder, len(vocab), tuned_rows)
    trained = set(by_id[:trainable])
    current = by_id[trainable:]
    if pretrained_vocab <= len(current):
        raise SystemExit(f"{bundle}: already {len(current)} pretrained-only words")

    order = list(itertools.islice(pretrained_only(tokenizer, words, trained), pretrained_vocab))
    if order[: len(current)] != current:
        raise SystemExit(f"{bundle}: its pretrained-only words are not the first {len(current)} of {vectors}")
    added = order[len(current):]
    row_of = {}
    for index, word in enumerate(words):
        row_of.setdefault(word, index)

    model = onnx.load(str(model_path))
    tables = static_tables(model, len(vocab))
    if len(tables) != 1:
        raise SystemExit(f"{bundle}: expected one static embedding table, found {len(tables)}")
    table = tables[0]
    old_rows = numpy_helper.to_array(table)  # (V, D)
    if old_rows.shape[1] != matrix.shape[1]:
        raise SystemExit(f"{bundle}: table width {old_rows.shape[1]} is not {vectors}'s {matrix.shape[1]}")
    if tuned_rows:
        shared = [w for w in by_id if w in row_of]
        cosine = mean_cosine(old_rows[[vocab[w] for w in shared]], matrix[[row_of[w] for w in shared]])
        if cosine < MIN_TUNED_COSINE:
            raise SystemExit(f"{bundle}: its tuned rows moved away from {vectors} (mean cosine {cosine:.3f}); not extended")
    elif not np.array_equal(old_rows[trainable:], matrix[[row_of[w] for w in current]].astype(old_rows.dtype)):
        raise SystemExit(f"{bundle}: its pretrained-only rows are not the {vectors} vectors (tuned?); not extended")
    else:
        cosine = None
    new_rows = np.concatenate([old_rows, matrix[[row_of[w] for w in added]].astype(old_rows.dtype)])
    table.CopyFrom(numpy_helper.from_array(new_rows, table.name))

    raw_tokenizer = json.loads(tokenizer_path.read_text(encoding="utf-8"))
    for offset, word in enumerate(added):
        raw_tokenizer["model"]["vocab"][word] = len(vocab) + offset

    with tempfile.TemporaryDirectory() as tmp:
        new_model, new_tokenizer = Path(tmp) / "model.onnx", Path(tmp) / "tokenizer.json"
        onnx.save(model, str(new_model))
        extended = Tokenizer.from_str(json.dumps(raw_tokenizer))
        extended.save(str(new_tokenizer), pretty=False)  # 0.7 MB less than pretty-printed, within the 40 MB budget
        if any(extended.token_to_id(w) != i for w, i in vocab.items()) or extended.get_vocab_size() != len(vocab) + len(added):
            raise SystemExit(f"{bundle}: the extended tokenizer moved an old word's id")
        examples = _check_extended_model(bundle, config, model_path, new_model, len(vocab), len(added))
        old_sha = config["model_sha256"]
        shutil.copyfile(new_model, model_path)
        shutil.copyfile(new_tokenizer, tokenizer_path)

    record = {
        "applied_after_export": True,
        "vectors": vectors,
        "pretrained_words_before": len(current),
        "pretrained_words_after": len(current) + len(added),
        "vocab_size_after": len(vocab) + len(added),
        "rows": "tuned" if tuned_rows else "frozen",
        "tuned_rows_mean_cosine": cosine,
        "logits_identical_on_old_vocabulary": True,
        "examples": examples,
    }
    _write_config(bundle, config, old_sha, record)
    return {"bundle": str(bundle), **record, "model_bytes": model_path.stat().st_size}
