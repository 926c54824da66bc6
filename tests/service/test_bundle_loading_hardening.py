"""Reading and loading bundles in a changing repository (core.bundle, service.inference.registry,
service.inference.model_control): the bytes hashed are the bytes served, the allow-list bounds
every mode, a name and version in two folders or a flat bundle beside version folders is refused
with its reason (no reload loop), one rule for a session's threads, and what reasons may show."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.bundle import BundleError
from service.settings import Settings
from tests.bundles import copy_repository, running_app

VERIFY = {"claim": "a dog runs", "evidence": ["a dog runs fast", "the sky is blue"]}
VERSION = "x-attserve-model-version"


def settings(repo: Path, **over) -> Settings:
    return Settings(model_repository=repo, max_batch_delay_ms=1, **over)


def other_graph(bundle: Path, target: Path) -> None:
    """A valid graph of the same shapes as `bundle`'s, with other weights (every float
    initializer tripled): it loads, and answers differently."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    model = onnx.load(bundle / "model.onnx")
    for tensor in model.graph.initializer:
        values = numpy_helper.to_array(tensor)
        if values.dtype == np.float32 and values.size > 1:
            tensor.CopyFrom(numpy_helper.from_array(values * 3, tensor.name))
    onnx.save(model, target)


def feeds(runtime) -> dict[str, np.ndarray]:
    """Some token ids for every input of `runtime`'s graph."""
    rng = np.random.RandomState(0)
    out = {}
    for i in runtime.session.get_inputs():
        shape = [3] * len(i.shape)
        out[i.name] = rng.randint(2, 30, size=shape).astype(np.int64)
    return out


def test_the_graph_served_is_the_graph_hashed_when_the_file_is_swapped_mid_load(service_bundles, tmp_path, monkeypatch):
    """model.onnx is replaced (atomic rename) by another valid graph after the loader hashed it
    and before onnxruntime builds the session: the session is still the graph whose sha256
    config.json vouches for (a loader that reads the path a second time serves the swapped one)."""
    import onnxruntime as ort

    from service.inference import runtime as runtime_module
    from service.inference.runtime import ModelRuntime

    bundle = copy_repository(service_bundles, tmp_path / "repo", ["fever"]) / "fever"
    genuine = ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)
    other_graph(bundle, tmp_path / "other.onnx")
    real_session = ort.InferenceSession

    def swap_then_build(*args, **kwargs):
        (tmp_path / "other.onnx").replace(bundle / "model.onnx")  # the file changes between hash and build
        return real_session(*args, **kwargs)

    monkeypatch.setattr(runtime_module.ort, "InferenceSession", swap_then_build)
    loaded = ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)
    monkeypatch.setattr(runtime_module.ort, "InferenceSession", real_session)
    x = feeds(genuine)
    assert all(np.array_equal(a, b) for a, b in zip(genuine.session.run(None, x), loaded.session.run(None, x)))
    # the swapped graph really answers otherwise (and is refused by its checksum on the next load)
    other = real_session(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    assert not np.allclose(genuine.session.run(None, x)[0], other.run(None, x)[0])
    with pytest.raises(BundleError, match="does not match config.json"):
        ModelRuntime.load(bundle, ["CPUExecutionProvider"], threads=1)
