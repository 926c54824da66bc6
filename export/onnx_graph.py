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

# suffix of a float16 copy of a table and of the nodes that read it (store_embeddings_fp16);
# export.rewrite.to_checkpoint (`attserve bundle to-checkpoint`) strips it to find the PyTorch parameter again
FP16_SUFFIX = "__fp16"


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


def round_embeddings_to_fp16(network: TextClassifier) -> list[tuple[int, int]]:
    """Round every nn.Embedding table to float16 values, in place, and return their shapes: the
    network then has exactly the weights that `store_embeddings_fp16` writes, so the parity check
    compares like with like."""
    shapes = []
    with torch.no_grad():
        for layer in network.modules():
            if isinstance(layer, torch.nn.Embedding):
                layer.weight.copy_(layer.weight.half().float())
                shapes.append(tuple(layer.weight.shape))
    return shapes


def store_embeddings_fp16(path: str | Path, shapes: list[tuple[int, int]]) -> int:
    """Rewrite the graph at `path` so each float32 embedding table (an initializer of one of
    `shapes` read by Gather) is stored as float16 and cast back to float32 after the lookup:
    half the bytes of the largest tensors, same float32 compute. Returns the tables converted."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    tables = {
        init.name: init for init in graph.initializer
        if init.data_type == onnx.TensorProto.FLOAT and tuple(init.dims) in set(shapes)
    }
    converted: set[str] = set()
    nodes = []
    for node in graph.node:
        if node.op_type == "Gather" and node.input[0] in tables:
            name = node.input[0]
            converted.add(name)
            half_out = f"{node.output[0]}{FP16_SUFFIX}"
            nodes.append(helper.make_node("Gather", [f"{name}{FP16_SUFFIX}", node.input[1]], [half_out],
                                          name=f"{node.name}{FP16_SUFFIX}", axis=next((a.i for a in node.attribute if a.name == "axis"), 0)))
            nodes.append(helper.make_node("Cast", [half_out], [node.output[0]], name=f"{node.name}__cast",
                                          to=onnx.TensorProto.FLOAT))
        else:
            nodes.append(node)
    users = {i for node in graph.node for i in node.input if i in converted and node.op_type != "Gather"}
    if users:
        raise ValueError(f"embedding tables {sorted(users)} are read by more than Gather; cannot store them as fp16")
    del graph.node[:]
    graph.node.extend(nodes)
    for name in converted:
        table = tables[name]
        graph.initializer.remove(table)
        graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(table).astype(np.float16), f"{name}{FP16_SUFFIX}"))
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    log.info("embeddings stored as float16", extra={"path": str(path), "tables": len(converted)})
    return len(converted)


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
