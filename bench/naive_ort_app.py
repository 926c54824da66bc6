"""Naive onnxruntime server: FastAPI + onnxruntime, one `session.run` per request, no batching
across requests. It separates what onnxruntime gains (against bench/naive_app.py's PyTorch
eager) from what batching gains (against the service). Same bundle, same numpy-only tokenizer
(core.tokenization.TextEncoder) as the service and the peers, same request bodies and
answers; handlers are plain `def` (FastAPI runs them in its threadpool), like naive_app.

`OnnxBundleModel` is also the model code of the LitServe and Ray Serve peers
(bench/peer_litserve.py, bench/peer_ray.py): it imports only numpy, onnxruntime and the
project's encoder, so it loads in their virtualenvs. A batch is padded to its longest text,
as in bench/peer_bento.py.

    BENCH_PEER_BUNDLE=<bundle dir>  BENCH_PEER_THREADS=1
    uvicorn bench.naive_ort_app:create_app --factory
"""

# No `from __future__ import annotations`: FastAPI must see create_app's body types, imported there.
import gc
import json
import os
from pathlib import Path
from typing import Any

import numpy as np


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class OnnxBundleModel:
    """One bundle (model.onnx, tokenizer.json, config.json) on onnxruntime's CPU provider."""

    def __init__(self, bundle: Path | str, threads: int = 1) -> None:
        import onnxruntime as ort

        from core.tokenization import TextEncoder

        bundle = Path(bundle)
        self.config = json.loads((bundle / "config.json").read_text(encoding="utf-8"))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(bundle / "model.onnx"), sess_options=options,
                                            providers=["CPUExecutionProvider"])
        self.encoder = TextEncoder.from_file(bundle / "tokenizer.json")
        self.labels = self.config["labels"]
        self.max_lengths = self.config["max_lengths"]
        self.task = self.config["task"]
        self.name = self.config["name"]

    @classmethod
    def from_env(cls) -> "OnnxBundleModel":
        return cls(os.environ["BENCH_PEER_BUNDLE"], int(os.environ.get("BENCH_PEER_THREADS", "1")))

    def _ids(self, texts: list[str], input_name: str) -> np.ndarray:
        from core.tokenization import pad_2d

        return pad_2d(self.encoder.encode(texts, self.max_lengths[input_name]).ids)

    def predict(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`{"label", "scores", "model", "truncated"}` for each input (entailment or classification)."""
        if self.task == "entailment":
            feeds = {"premise_ids": self._ids([x["premise"] for x in inputs], "premise_ids"),
                     "hypothesis_ids": self._ids([x["hypothesis"] for x in inputs], "hypothesis_ids")}
        elif self.task == "classification":
            feeds = {"input_ids": self._ids([x["text"] for x in inputs], "input_ids")}
        else:
            raise ValueError(f"task {self.task!r}: the peers serve entailment and classification bundles")
        logits = self.session.run(None, feeds)[0]  # (B, C)
        probs = _softmax(logits.astype(np.float64))
        return [{"label": self.labels[int(p.argmax())], "scores": dict(zip(self.labels, p.tolist())),
                 "model": self.name, "truncated": False} for p in probs]


def freeze_gc() -> None:
    """The service's start-up treatment (service/http/app.py): collect, then freeze what is alive."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def create_app():
    from fastapi import FastAPI

    from service.http.schemas import TASK_SCHEMAS

    ClassifyBody, EntailmentBody = TASK_SCHEMAS["classification"].body, TASK_SCHEMAS["entailment"].body

    model = OnnxBundleModel.from_env()

    def handle(body: Any) -> Any:
        if hasattr(body, "inputs"):
            return {"results": model.predict([x.model_dump() for x in body.inputs])}
        return model.predict([body.model_dump()])[0]

    app = FastAPI(title="naive onnxruntime server")

    @app.post("/classify")
    def classify(body: ClassifyBody) -> Any:
        return handle(body)

    @app.post("/entailment")
    def entailment(body: EntailmentBody) -> Any:
        return handle(body)

    @app.get("/health/ready")
    def ready() -> dict:
        return {"status": "ready"}

    model.predict([{"premise": "warm", "hypothesis": "up", "text": "warm up"}])
    freeze_gc()
    return app
