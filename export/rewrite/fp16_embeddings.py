"""Store an existing bundle's embedding tables in float16, in place, when its checkpoint is gone.

`attserve export` does this itself for recipes with `[embeddings] export_dtype = "float16"`
(it rounds the PyTorch tables first, so its parity check compares like with like). This rewrite
is for bundles exported before that setting: it applies the same graph rewrite
(`export.onnx_graph.store_embeddings`) to the shipped graph, measures the new graph against
the old one on seeded random batches (the only change is the rounding of the tables), and
records that beside the export's parity in config.json, with the new checksum and version.

    attserve bundle fp16-embeddings model_repository/snli-attconv-light ...
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from tokenizers import Tokenizer

from core.bundle import sha256_file
from export.onnx_graph import store_embeddings
from export.parity import onnx_feed, random_batches as parity_batches

BATCH_SIZES = (1, 3, 17, 24, 64)
MAX_DIFF = 1e-2  # rounding a table to fp16 moves its values by <= 2^-11 relative


def static_tables(model: onnx.ModelProto, vocab_size: int) -> list[onnx.TensorProto]:
    """Tables with one row per vocabulary entry that only Gather reads (a tuned channel has
    fewer rows: only the ids training could update)."""
    readers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
    return [init for init in model.graph.initializer
            if len(init.dims) == 2 and init.dims[0] == vocab_size and readers.get(init.name) == {"Gather"}]


def embedding_shapes(model: onnx.ModelProto, vocab_size: int) -> list[tuple[int, int]]:
    """float32 tables with one row per vocabulary entry that only Gather reads."""
    return [tuple(init.dims) for init in static_tables(model, vocab_size) if init.data_type == onnx.TensorProto.FLOAT]


def random_batches(config: dict, vocab_size: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Graph feeds of export's parity batches (export.parity.random_batches: mixed lengths, and
    for verification 1 to max_evidence real evidence slots) at BATCH_SIZES."""
    task = config["task"]
    return [onnx_feed(task, ids) for ids in parity_batches(task, vocab_size, config["max_lengths"], config.get("max_evidence"),
                                                           seed=seed, batch_sizes=BATCH_SIZES)]


def convert(bundle: Path) -> dict:
    config_path = bundle / "config.json"
    config = json.loads(config_path.read_text())
    vocab_size = Tokenizer.from_file(str(bundle / "tokenizer.json")).get_vocab_size()
    model_path = bundle / "model.onnx"
    shapes = embedding_shapes(onnx.load(str(model_path)), vocab_size)
    if not shapes:
        raise SystemExit(f"{bundle}: no float32 embedding table found (already converted?)")
    with tempfile.TemporaryDirectory() as tmp:
        converted = Path(tmp) / "model.onnx"
        shutil.copyfile(model_path, converted)
        store_embeddings(converted, shapes, "float16")
        before = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
        after = ort.InferenceSession(str(converted), providers=["CPUExecutionProvider"])
        max_diff, mismatches, examples = 0.0, 0, 0
        for feed in random_batches(config, vocab_size):
            old = before.run(None, feed)[0]
            new = after.run(None, feed)[0]
            max_diff = max(max_diff, float(np.abs(old - new).max()))
            mismatches += int((old.argmax(-1) != new.argmax(-1)).sum())
            examples += old.shape[0]
        if max_diff > MAX_DIFF:
            raise SystemExit(f"{bundle}: fp16 tables moved logits by {max_diff:.2e} > {MAX_DIFF}; not converted")
        old_sha = config["model_sha256"]
        shutil.copyfile(converted, model_path)
    config["model_sha256"] = sha256_file(model_path)
    if config["version"] == old_sha[:12]:
        config["version"] = config["model_sha256"][:12]
    config["parity"]["embeddings_float16"] = {
        "applied_after_export": True,
        "max_abs_diff_vs_float32_graph": max_diff,
        "argmax_mismatches": mismatches,
        "examples": examples,
        "batch_sizes": list(BATCH_SIZES),
    }
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return {"bundle": str(bundle), "tables": len(shapes), "max_abs_diff": max_diff,
            "argmax_mismatches": mismatches, "examples": examples,
            "bytes": model_path.stat().st_size}
