"""A `transformers` pipeline server: FastAPI around `pipeline("text-classification")` on the
saved Hugging Face folder (the PyTorch weights and tokenizer `save_pretrained` wrote), torch on
one thread, `torch.inference_mode`. A pair is `{"text", "text_pair"}`; a 32-pair request is one
list passed with `batch_size=32` (one forward on its padded batch). Same request bodies and
answers as the service's `/entailment`.

One lock around the pipeline: a fast tokenizer's truncation settings are written on each call,
and two threads calling at once fail with `RuntimeError: Already borrowed`; on one core the
calls would run one at a time anyway.

    BENCH_HF_SOURCE=<save_pretrained folder>  BENCH_TORCH_THREADS=1
    uvicorn bench.hf_pipeline_app:create_app --factory
"""

# No `from __future__ import annotations`: FastAPI must see create_app's body types, imported there.
import os
import threading
from typing import Any

from bench.hf_ort_app import LABELS, entailment_app


class PipelineModel:
    def __init__(self, folder: str, threads: int = 1) -> None:
        import torch
        from transformers import pipeline

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        self.torch = torch
        self.pipe = pipeline("text-classification", model=folder, tokenizer=folder, device="cpu")
        self.name = os.path.basename(os.path.normpath(folder))
        self.lock = threading.Lock()

    def predict(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pairs = [{"text": x["premise"], "text_pair": x["hypothesis"]} for x in inputs]
        with self.lock, self.torch.inference_mode():
            ranked = self.pipe(pairs, batch_size=len(pairs), top_k=None, truncation=True)
        answers = []
        for ranking in ranked:
            scores = {LABELS[r["label"].lower()]: r["score"] for r in ranking}
            answers.append({"label": max(scores, key=scores.get), "scores": scores, "model": self.name,
                            "truncated": False})
        return answers


def create_app():
    model = PipelineModel(os.environ["BENCH_HF_SOURCE"], int(os.environ.get("BENCH_TORCH_THREADS", "1")))
    return entailment_app(model, "transformers pipeline server")
