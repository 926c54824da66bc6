"""The service minus the model: the real app (routes, validation, middleware, metrics, the
batcher and its tokenizing) with onnxruntime replaced by a constant answer per item.

Beside the bare HTTP floor (bench/floor_app.py: uvicorn + FastAPI parsing JSON and answering a
constant), this floor says what everything of ours except the network costs; the service's
distance from it is the network's share. Only `ModelRuntime.infer` (one graph call) is
replaced: warm-up, `infer_batch`, the call planning and everything else run as in the service,
calling the constant `infer` (so warm-up costs nothing and no graph runs at all), and every
request gets row 0 of the labels with uniform scores. Warm-up is deliberately not patched: a
stand-in for it would break the app whenever `warmup` gains an argument;
tests/process/test_service_floor_app.py starts this app as a process and checks its answers.

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
    listed = self.list_index
    return [ItemOutput(logits, probs, 0, [0.0] * len(item.ids[listed]) if listed is not None else None,
                       {} if row in set(explain_rows) else None) for row, item in enumerate(items)]


def create_app():
    # Patches the class for the whole process: run it as a server process (bench.servers), never
    # inside a test process that also runs the real service.
    ModelRuntime.infer = _constant_infer
    return create_service_app()
