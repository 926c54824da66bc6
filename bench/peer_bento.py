"""The peer: the same ONNX bundle served by BentoML with its adaptive batching.

Runs in its own virtualenv (`.venv-peer`, made by `attserve bench` when missing), so BentoML's
pins never touch ours; it imports only numpy, onnxruntime, tokenizers and the project's
numpy-only encoder (core.tokenization). One batchable API per task at the service's paths;
BentoML's body form is `{"inputs": [...]}` for one input or many (its batcher merges the
lists of concurrent requests up to max_batch_size, waiting at most what its latency model
says, bounded by max_latency_ms). A batch is padded to its longest text (no length buckets:
the straightforward implementation a BentoML user writes).

    BENCH_PEER_BUNDLE=<bundle dir> BENCH_PEER_THREADS=<n> BENCH_PEER_MAX_BATCH=32 \
        bentoml serve bench.peer_bento:Peer --port 3000
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path
from typing import Any

import bentoml
import numpy as np
import onnxruntime as ort

from core.tokenization import TextEncoder, pad_2d, pad_3d

BUNDLE = Path(os.environ.get("BENCH_PEER_BUNDLE", "."))
THREADS = int(os.environ.get("BENCH_PEER_THREADS", "1"))
MAX_BATCH = int(os.environ.get("BENCH_PEER_MAX_BATCH", "32"))
# BentoML's adaptive batcher bounds each request's queueing by this (its default is 60 s).
MAX_LATENCY_MS = int(os.environ.get("BENCH_PEER_MAX_LATENCY_MS", "10000"))


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# Tuned per BentoML's configuration reference: one worker, the access log off (the service
# configuration's `logging.access.enabled`; it logs a line per request by default).
@bentoml.service(name="attserve-peer", workers=1, traffic={"timeout": 30}, logging={"access": {"enabled": False}})
class Peer:
    def __init__(self) -> None:
        self.config = json.loads((BUNDLE / "config.json").read_text(encoding="utf-8"))
        options = ort.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(BUNDLE / "model.onnx"), sess_options=options,
                                            providers=["CPUExecutionProvider"])
        self.encoder = TextEncoder.from_file(BUNDLE / "tokenizer.json")
        self.labels = self.config["labels"]
        self.max_lengths = self.config["max_lengths"]
        # The service's start-up treatment (service/http/app.py): freeze what is alive after loading
        # out of the garbage collector, so full collections walk only what requests allocate.
        if self.config["task"] != "verification":  # one warm-up call
            self._answer({name: np.ones((1, 4), dtype=np.int64) for name in self.config["inputs"]})
        gc.collect()
        gc.freeze()

    def _texts(self, texts: list[str], input_name: str) -> list[list[int]]:
        return self.encoder.encode(texts, self.max_lengths[input_name]).ids

    def _answer(self, feeds: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        logits = self.session.run(None, feeds)[0]  # (B, C)
        probs = _softmax(logits.astype(np.float64))
        return [{"label": self.labels[int(p.argmax())], "scores": dict(zip(self.labels, p.tolist())),
                 "model": self.config["name"], "truncated": False} for p in probs]

    @bentoml.api(route="/classify", batchable=True, max_batch_size=MAX_BATCH, max_latency_ms=MAX_LATENCY_MS)
    def classify(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._answer({"input_ids": pad_2d(self._texts([x["text"] for x in inputs], "input_ids"))})

    @bentoml.api(route="/entailment", batchable=True, max_batch_size=MAX_BATCH, max_latency_ms=MAX_LATENCY_MS)
    def entailment(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._answer({
            "premise_ids": pad_2d(self._texts([x["premise"] for x in inputs], "premise_ids")),
            "hypothesis_ids": pad_2d(self._texts([x["hypothesis"] for x in inputs], "hypothesis_ids")),
        })

    @bentoml.api(route="/verify", batchable=True, max_batch_size=MAX_BATCH, max_latency_ms=MAX_LATENCY_MS)
    def verify(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        flat = self._texts([s for x in inputs for s in x["evidence"]], "evidence_ids")
        groups, at = [], 0
        for x in inputs:
            groups.append(flat[at : at + len(x["evidence"])])
            at += len(x["evidence"])
        return self._answer({"claim_ids": pad_2d(self._texts([x["claim"] for x in inputs], "claim_ids")),
                             "evidence_ids": pad_3d(groups)})
