"""Write a network as an ONNX graph whose inputs are the task's ids tensors, with dynamic
batch, length and evidence-count axes. The single export path used by the export command
and by the model tests."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch

from models.base import TASKS, IdsOnly, TextClassifier

OPSET = 18
log = logging.getLogger(__name__)


def example_ids(task: str, vocab_size: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Example inputs for tracing. Every axis gets a distinct size >= 2 so the exporter cannot
    mistake one axis for another or specialise a size-1 axis."""
    g = torch.Generator().manual_seed(seed)
    sizes = {2: [(3, 7), (3, 6)], 3: [(3, 4, 5)]}
    out = []
    spec = TASKS[task]
    two_d = iter(sizes[2])
    for rank in spec.input_ranks:
        shape = next(two_d) if rank == 2 else sizes[3][0]
        out.append(torch.randint(1, vocab_size, shape, generator=g))
    return tuple(out)


def dynamic_shapes(task: str) -> dict[str, dict[int, torch.export.Dim]]:
    batch = torch.export.Dim("batch", min=1, max=4096)
    shapes: dict[str, dict[int, torch.export.Dim]] = {}
    for name, rank in zip(TASKS[task].inputs, TASKS[task].input_ranks):
        stem = name.removesuffix("_ids")
        length = torch.export.Dim(f"{stem}_length", min=1, max=100_000)
        if rank == 2:
            shapes[name] = {0: batch, 1: length}
        else:
            shapes[name] = {0: batch, 1: torch.export.Dim(f"{stem}_count", min=1, max=4096), 2: length}
    return shapes


def export_onnx(network: TextClassifier, path: str | Path, opset: int = OPSET) -> Path:
    """Export `network` (switched to eval mode) to `path` and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    task = network.config.task
    spec = TASKS[task]
    wrapper = IdsOnly(network).eval()
    inputs = example_ids(task, network.config.vocab_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            inputs,
            str(path),
            input_names=list(spec.inputs),
            output_names=list(spec.outputs),
            dynamic_shapes={"ids": tuple(dynamic_shapes(task).values())},
            dynamo=True,
            opset_version=opset,
            external_data=False,
            verbose=False,
        )
    log.info("exported onnx", extra={"path": str(path), "task": task})
    return path
