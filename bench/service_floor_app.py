"""The service minus the model: the real app (routes, validation, middleware, metrics, the
batcher and its tokenizing) with onnxruntime replaced by a constant answer per item.

Beside the bare HTTP floor (bench/floor_app.py: uvicorn + FastAPI parsing JSON and answering a
constant), this floor says what everything of ours except the network costs; the service's
distance from it is the network's share. Only `ModelRuntime._call` (one graph call: its feeds
and its session run) is replaced: warm-up, `run_batch`, the call planning, the softmax and
everything else run as in the service, calling the constant `_call` (so warm-up costs nothing
and no graph runs at all), and every request gets row 0 of the labels with uniform scores. Warm-up is deliberately not patched: a
stand-in for it would break the app whenever `warmup` gains an argument;
tests/process/test_service_floor_app.py starts this app as a process and checks its answers.

    ATTSERVE_...=... uvicorn bench.service_floor_app:create_app --factory
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from service.http.app import create_app as create_service_app
from service.inference.runtime import Item, ModelRuntime


def _constant_call(self: ModelRuntime, items: Sequence[Item],
                   explain_rows: Sequence[int]) -> tuple[np.ndarray, list | None, dict[int, dict]]:
    """What `ModelRuntime._call` returns, for every item the same: zero logits (uniform scores,
    label 0), zero per-text scores, empty explanations."""
    logits = np.zeros((len(items), len(self.config.labels)), dtype=np.float32)
    listed = self.list_index
    per_text = [[0.0] * len(item.ids[listed]) for item in items] if listed is not None else None
    return logits, per_text, {row: {} for row in explain_rows}


def create_app():
    # Patches the class for the whole process: run it as a server process (bench.servers), never
    # inside a test process that also runs the real service.
    ModelRuntime._call = _constant_call
    return create_service_app()
