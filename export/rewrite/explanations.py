"""Expose the explaining attention of an existing bundle's graph, in place, when its checkpoint is gone.

`attserve export` does this itself (export.explanations.expose_explanation, checked against
PyTorch by the parity check). This rewrite is for bundles exported before that: it applies the
same rewrite to the shipped graph (which tensor to expose is decided by the architecture; a
small network of that architecture stands in for the checkpoint, only its type and config are
read), checks that the logits of the rewritten graph are bit-identical to the old graph's on
seeded random batches (the rewrite adds an output and touches no node), and records the
explanation, the new checksum and version in config.json.

    attserve bundle explanations model_repository/snli-attconv-light ...
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

from core.bundle import read_config, sha256_file
from export.explanations import expose_explanation
from export.parity import random_batches
from models import TASKS, build_network


def convert(bundle: Path, multi_context: str = "wise") -> dict:
    config_path = bundle / "config.json"
    config = read_config(config_path)
    if config.explanation is not None:
        raise SystemExit(f"{bundle}: already exposes {config.explanation.output!r}")
    # multi_context is read by networks of a task with a list of texts (AttConv's context-wise or -conc)
    overrides = {"multi_context": multi_context} if TASKS[config.task].list_field is not None else {}
    stand_in = build_network(config.architecture, task=config.task, vocab_size=32,
                             num_labels=len(config.labels), **overrides)
    model_path = bundle / "model.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        rewritten = Path(tmp) / "model.onnx"
        shutil.copyfile(model_path, rewritten)
        spec = expose_explanation(rewritten, stand_in)
        if spec is None:
            raise SystemExit(f"{bundle}: {config.architecture} has no token attention to expose")
        before = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
        after = ort.InferenceSession(str(rewritten), providers=["CPUExecutionProvider"])
        examples = 0
        for ids in random_batches(config.task, 1000, config.max_lengths, config.max_evidence):
            feed = dict(zip(TASKS[config.task].inputs, ids))
            old = before.run(list(config.outputs), feed)
            new = after.run(list(config.outputs), feed)
            for a, b in zip(old, new, strict=True):
                if not np.array_equal(a, b):
                    raise SystemExit(f"{bundle}: exposing the explanation changed the outputs; not converted")
            examples += len(ids[0])
        old_sha = config.model_sha256
        shutil.copyfile(rewritten, model_path)
    raw = json.loads(config_path.read_text())
    raw["model_sha256"] = sha256_file(model_path)
    if raw["version"] == old_sha[:12]:
        raw["version"] = raw["model_sha256"][:12]
    raw["explanation"] = spec.model_dump()
    config_path.write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    read_config(config_path)  # the result is a valid bundle config
    return {"bundle": str(bundle), "kind": spec.kind, "layout": spec.layout, "outputs_identical_on": examples}
