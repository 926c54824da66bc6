"""The service minus the model: the real app (routes, validation, middleware, metrics, the
batcher and its tokenizing) with onnxruntime replaced by a constant answer per item.

Beside the bare HTTP floor (bench/floor_app.py: uvicorn + FastAPI parsing JSON and answering a
constant), this floor says what everything of ours except the network costs; the service's
distance from it is the network's share. Warm-up still runs the real graph once per shape
(start-up only); every request after that gets row 0 of the labels with uniform scores.

    ATTSERVE_...=... uvicorn bench.service_floor_app:create_app --factory
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from service.app import create_app as create_service_app
from service.runtime import Item, ItemOutput, ModelRuntime


def _constant_infer(self: ModelRuntime, items: Sequence[Item], explain_rows: Sequence[int] = ()) -> list[ItemOutput]:
    labels = len(self.config.labels)
    probs = [1.0 / labels] * labels
    logits = np.zeros(labels, dtype=np.float32)
    evidence = self.config.task == "verification"
    return [ItemOutput(logits, probs, 0, [0.0] * len(item.ids[1]) if evidence else None,
                       {} if row in set(explain_rows) else None) for row, item in enumerate(items)]


def create_app():
    ModelRuntime.warmup = lambda self, max_batch_size, max_batch_tokens: 0.0  # no graph run at all
    ModelRuntime.infer = _constant_infer
    return create_service_app()
