"""Naive server: what a user would deploy without a serving layer. FastAPI + PyTorch eager,
the checkpoint loaded with `training.checkpoint.load_checkpoint`, one forward per request
(a 32-input request is one forward of batch 32, a single input a forward of batch 1), no
batching across requests. Handlers are plain `def` (FastAPI runs them in its threadpool, the
documented way to call blocking code), same request bodies and answers as the service.

    BENCH_NAIVE_CHECKPOINT=<checkpoint dir>  BENCH_TORCH_THREADS=<n>
    uvicorn bench.naive_app:create_app --factory
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI

from service.http.schemas import TASK_SCHEMAS

# the service's own request bodies, so the baseline validates exactly what the service does
ClassifyBody = TASK_SCHEMAS["classification"].body
EntailmentBody = TASK_SCHEMAS["entailment"].body
VerifyBody = TASK_SCHEMAS["verification"].body

def create_app() -> FastAPI:
    import torch

    from core.tokenization import TextEncoder
    from training.batching import encode_examples
    from training.checkpoint import TOKENIZER_FILE, load_checkpoint
    from training.examples import ClaimExample, PairExample, TextExample

    checkpoint = os.environ["BENCH_NAIVE_CHECKPOINT"]
    threads = int(os.environ.get("BENCH_TORCH_THREADS", "0"))
    if threads:
        torch.set_num_threads(threads)
    network, meta = load_checkpoint(checkpoint)
    encoder = TextEncoder.from_file(os.path.join(checkpoint, TOKENIZER_FILE))
    labels = meta.labels

    def predict(inputs: list, task: str) -> list[dict]:
        if task == "entailment":
            examples = [PairExample(x.premise, x.hypothesis, labels[0]) for x in inputs]
        elif task == "verification":
            examples = [ClaimExample(x.claim, tuple(x.evidence), labels[0]) for x in inputs]
        else:
            examples = [TextExample(x.text, labels[0]) for x in inputs]
        ids = encode_examples(encoder, examples, meta.max_lengths, meta.max_evidence, task=meta.task)
        with torch.inference_mode():
            out = network.logits_from_ids(*(torch.from_numpy(a) for a in ids))  # (B, C)
            probs = torch.softmax(out.float(), dim=-1).tolist()
        return [
            {"label": labels[max(range(len(p)), key=p.__getitem__)], "scores": dict(zip(labels, p)),
             "model": meta.name, "truncated": False}
            for p in probs
        ]

    def handle(body: Any, task: str) -> Any:
        if hasattr(body, "inputs"):
            return {"results": predict(body.inputs, task)}
        return predict([body], task)[0]

    app = FastAPI(title="naive PyTorch server")

    @app.post("/classify")
    def classify(body: ClassifyBody) -> Any:
        return handle(body, "classification")

    @app.post("/entailment")
    def entailment(body: EntailmentBody) -> Any:
        return handle(body, "entailment")

    @app.post("/verify")
    def verify(body: VerifyBody) -> Any:
        return handle(body, "verification")

    @app.get("/health/ready")
    def ready() -> dict:
        return {"status": "ready"}

    return app
