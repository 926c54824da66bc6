"""Plain FastAPI + onnxruntime server for a Hugging Face classifier exported to ONNX: what a
user writes without a serving framework. The model's own `tokenizer.json` encodes each pair
with its template (`[CLS] a [SEP] b [SEP]`), truncated longest-first to the model's length and
padded to the longest pair of the request; one `session.run` per request (a 32-pair request is
one run on its padded batch), no batching across requests. Same request bodies and answers as
the service's `/entailment`; handlers are plain `def` (FastAPI's threadpool), like
bench/naive_ort_app.py.

    BENCH_HF_BUNDLE=<folder with model.onnx, tokenizer.json, config.json>  BENCH_PEER_THREADS=1
    uvicorn bench.hf_ort_app:create_app --factory
"""

# No `from __future__ import annotations`: FastAPI must see create_app's body types, imported there.
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from bench.naive_ort_app import _softmax, freeze_gc

# the service's names for the NLI labels (export/import_hf maps them the same way)
LABELS = {"entailment": "entailment", "neutral": "neutral", "contradiction": "contradiction"}


class HfOnnxModel:
    """model.onnx on onnxruntime's CPU provider, tokenizer.json through `tokenizers`."""

    def __init__(self, folder: Path | str, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        folder = Path(folder)
        # an imported bundle keeps the model's own config as transformers_config.json
        config_file = folder / "transformers_config.json"
        config = json.loads((config_file if config_file.is_file() else folder / "config.json").read_text())
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(folder / "model.onnx"), sess_options=options,
                                            providers=["CPUExecutionProvider"])
        self.feeds = [i.name for i in self.session.get_inputs()]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(config["max_position_embeddings"])
        self.tokenizer.enable_padding(pad_id=config.get("pad_token_id") or 0)
        self.labels = [LABELS[config["id2label"][str(i)].lower()] for i in range(len(config["id2label"]))]
        self.name = folder.name

    def predict(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`{"label", "scores", "model", "truncated"}` for each `{"premise", "hypothesis"}`."""
        encodings = self.tokenizer.encode_batch([(x["premise"], x["hypothesis"]) for x in inputs])
        columns = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
        feeds = {name: np.array([getattr(e, columns[name]) for e in encodings], dtype=np.int64) for name in self.feeds}
        probs = _softmax(self.session.run(["logits"], feeds)[0].astype(np.float64))
        return [{"label": self.labels[int(p.argmax())], "scores": dict(zip(self.labels, p.tolist())),
                 "model": self.name, "truncated": bool(e.overflowing)} for p, e in zip(probs, encodings)]


def entailment_app(model: Any, title: str):
    """A FastAPI app answering /entailment (one pair or `inputs`) with `model.predict` on a list
    of {"premise", "hypothesis"} dicts, warmed up once; the plain peers' one app."""
    from fastapi import FastAPI

    from service.http.schemas import TASK_SCHEMAS

    EntailmentBody = TASK_SCHEMAS["entailment"].body
    app = FastAPI(title=title)

    @app.post("/entailment")
    def entailment(body: EntailmentBody) -> Any:
        if hasattr(body, "inputs"):
            return {"results": model.predict([x.model_dump() for x in body.inputs])}
        return model.predict([body.model_dump()])[0]

    @app.get("/health/ready")
    def ready() -> dict:
        return {"status": "ready"}

    model.predict([{"premise": "warm", "hypothesis": "up"}])
    freeze_gc()
    return app


def create_app():
    model = HfOnnxModel(os.environ["BENCH_HF_BUNDLE"], int(os.environ.get("BENCH_PEER_THREADS", "1")))
    return entailment_app(model, "FastAPI + onnxruntime, a Hugging Face classifier")
