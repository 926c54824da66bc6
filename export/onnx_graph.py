"""Write a network as an ONNX graph whose inputs are the task's ids tensors, with dynamic
batch, length and evidence-count axes. The single export path used by the export command
and by the model tests."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import torch

from models.base import TASKS, IdsOnly, TextClassifier

OPSET = 18
log = logging.getLogger(__name__)

# suffix of a float16 copy of a table and of the nodes that read it (store_embeddings);
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


# how export may store the embedding tables (a recipe's [embeddings] export_dtype)
EMBEDDING_DTYPES = ("float32", "float16", "int8")
# suffixes of an int8 table and of its per-row float16 scales (store_embeddings, int8)
INT8_SUFFIX = "__int8"
SCALE_SUFFIX = "__scale"
INT8_MAX = 127  # symmetric: -127..127, so a row's largest value maps to +-127 exactly


def round_embeddings(network: TextClassifier, dtype: str) -> list[tuple[int, int]]:
    """Round every nn.Embedding table, in place, to the values the graph will compute with when
    it stores the tables as `dtype`, and return their shapes (none for float32): the network
    then has exactly the weights that `store_embeddings` writes, so the parity check compares
    like with like.

    float16: each value rounded to float16. int8: each row rounded to a multiple of its own
    scale (its largest magnitude / 127, itself a float16), the row's largest value to +-127."""
    if dtype not in EMBEDDING_DTYPES:
        raise ValueError(f"embedding dtype {dtype!r}; expected one of {', '.join(EMBEDDING_DTYPES)}")
    if dtype == "float32":
        return []
    shapes = []
    with torch.no_grad():
        for layer in network.modules():
            if isinstance(layer, torch.nn.Embedding):
                weight = layer.weight  # (V, D)
                if dtype == "float16":
                    weight.copy_(weight.half().float())
                else:
                    scale = (weight.abs().amax(dim=1, keepdim=True) / INT8_MAX).half().float()  # (V, 1)
                    steps = torch.where(scale > 0, torch.round(weight / scale.clamp_min(1e-30)), torch.zeros_like(weight))
                    weight.copy_(steps.clamp(-INT8_MAX, INT8_MAX) * scale)
                shapes.append(tuple(weight.shape))
    return shapes


def _int8_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 steps (V, D), float16 scales (V, 1)) of a table `round_embeddings(..., "int8")`
    rounded: exact, since each row is a multiple of a float16 scale with +-127 at its peak."""
    peak = np.abs(table).max(axis=1, keepdims=True)  # (V, 1) = 127 * scale, exactly
    scale = (peak / INT8_MAX).astype(np.float16)
    wide = scale.astype(np.float32)
    steps = np.where(wide > 0, np.rint(table / np.where(wide > 0, wide, 1)), 0).astype(np.int8)
    if not np.array_equal(steps.astype(np.float32) * wide, table):
        raise ValueError("an embedding table is not int8-rounded (round_embeddings(network, \"int8\") first)")
    return steps, scale


def store_embeddings(path: str | Path, shapes: list[tuple[int, int]], dtype: str) -> int:
    """Rewrite the graph at `path` so each float32 embedding table (an initializer of one of
    `shapes` read by Gather) is stored as `dtype` and widened back to float32 after the lookup:
    float16 halves the bytes of the largest tensors, int8 (plus a float16 scale per row) nearly
    quarters them; the compute stays float32. Returns the tables converted."""
    import onnx
    from onnx import helper, numpy_helper

    if dtype not in ("float16", "int8"):
        raise ValueError(f"embedding tables are stored as float16 or int8, not {dtype!r}")
    model = onnx.load(str(path))
    graph = model.graph
    tables = {
        init.name: init for init in graph.initializer
        if init.data_type == onnx.TensorProto.FLOAT and tuple(init.dims) in set(shapes)
    }
    converted: set[str] = set()
    nodes = []
    for node in graph.node:
        if node.op_type != "Gather" or node.input[0] not in tables:
            nodes.append(node)
            continue
        name, ids, out = node.input[0], node.input[1], node.output[0]
        converted.add(name)
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if dtype == "float16":
            nodes += [helper.make_node("Gather", [f"{name}{FP16_SUFFIX}", ids], [f"{out}{FP16_SUFFIX}"],
                                       name=f"{node.name}{FP16_SUFFIX}", axis=axis),
                      helper.make_node("Cast", [f"{out}{FP16_SUFFIX}"], [out], name=f"{node.name}__cast",
                                       to=onnx.TensorProto.FLOAT)]
        else:  # the row's steps times the row's scale, both widened to float32
            nodes += [helper.make_node("Gather", [f"{name}{INT8_SUFFIX}", ids], [f"{out}{INT8_SUFFIX}"],
                                       name=f"{node.name}{INT8_SUFFIX}", axis=axis),
                      helper.make_node("Cast", [f"{out}{INT8_SUFFIX}"], [f"{out}__steps"], name=f"{node.name}__cast",
                                       to=onnx.TensorProto.FLOAT),
                      helper.make_node("Gather", [f"{name}{SCALE_SUFFIX}", ids], [f"{out}{SCALE_SUFFIX}"],
                                       name=f"{node.name}{SCALE_SUFFIX}", axis=axis),
                      helper.make_node("Cast", [f"{out}{SCALE_SUFFIX}"], [f"{out}__scales"],
                                       name=f"{node.name}__cast_scale", to=onnx.TensorProto.FLOAT),
                      helper.make_node("Mul", [f"{out}__steps", f"{out}__scales"], [out], name=f"{node.name}__dequantize")]
    users = {i for node in graph.node for i in node.input if i in converted and node.op_type != "Gather"}
    if users:
        raise ValueError(f"embedding tables {sorted(users)} are read by more than Gather; cannot store them as {dtype}")
    del graph.node[:]
    graph.node.extend(nodes)
    for name in converted:
        table = tables[name]
        graph.initializer.remove(table)
        values = numpy_helper.to_array(table)
        if dtype == "float16":
            graph.initializer.append(numpy_helper.from_array(values.astype(np.float16), f"{name}{FP16_SUFFIX}"))
        else:
            steps, scale = _int8_rows(values)
            graph.initializer.extend([numpy_helper.from_array(steps, f"{name}{INT8_SUFFIX}"),
                                      numpy_helper.from_array(scale, f"{name}{SCALE_SUFFIX}")])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    log.info("embeddings stored", extra={"path": str(path), "tables": len(converted), "dtype": dtype})
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
