"""Expose the attention a network actually used as an extra output of its ONNX graph.

The papers explain a decision by their attention (AttConv Fig. 6: which premise words each
hypothesis word attends to; ABCNN Fig. 4: the attention matrix; ACT: the global attention over
tokens). Those tensors are already computed inside the exported graph; this module finds the
one that explains the decision and adds it to the graph's outputs, unchanged. A run that asks
only for `logits` pays nothing for it (the tensor is an intermediate either way), and the
explanation is the network's own number, not a re-computation beside it.

Which tensor (found by the exporter's per-node `namespace` metadata, innermost module first):
    AttConv     the first attentive convolution's attention: masked softmax of the matching
                scores (eq. 4); tx over ty (hypothesis over premise, claim over each evidence
                sentence, or the text over itself)
    ABCNN-1/3   block 0's attention matrix A (eq. 2), match scores between premise and
                hypothesis tokens, 0 on padding; the service normalises each row
    ACT         the global attention weights of the pooler over the tokens
BCNN has no attention and ABCNN-2 attends only over convolution columns (not tokens): no output.

`torch_explanation` returns the same tensor from the PyTorch network (forward hooks), so the
export's parity check covers the explanation like the logits.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from core.tasks import TaskForm
from models import TASKS, TextClassifier
from models.abcnn import attention_matrix
from models.layers import zero_padding
from core.bundle import ExplanationOutput

log = logging.getLogger(__name__)

OUTPUT = "explanation"


def explanation_spec(network: TextClassifier) -> ExplanationOutput | None:
    """What `expose_explanation` adds for this network, or None when it has no token attention.
    Rows and columns are the graph inputs of the task's fields, by its form (never its name)."""
    config = network.config
    family = type(network).__name__
    task = TASKS[config.task]
    inputs = task.inputs
    if family == "AttConv":
        if task.form is TaskForm.TEXT:
            return ExplanationOutput(output=OUTPUT, kind="alignment", rows=inputs[0], columns=inputs[0],
                                     method="AttConv attention of each token over the text's tokens (softmax of the "
                                            "matching scores, eq. 4): the weights of its attentive context")
        if task.form is TaskForm.PAIR:  # tx = the second text, ty = the first (models.attconv)
            first, second = task.field_names
            return ExplanationOutput(output=OUTPUT, kind="alignment", rows=inputs[1], columns=inputs[0],
                                     method=f"AttConv attention of each {second} token over the {first} tokens "
                                            "(softmax of the matching scores, eq. 4): the weights of its attentive context")
        if task.form is not TaskForm.CONTEXTS:
            raise ValueError(f"no AttConv explanation for {task.form.value} task {task.name!r}")
        text, many = task.field_names
        conc = config.multi_context == "conc"
        return ExplanationOutput(
            output=OUTPUT, kind="alignment", rows=inputs[0], columns=inputs[1],
            layout="evidence_concatenated" if conc else "evidence_slots", normalize_rows=conc,
            method=f"AttConv attention of each {text} token over the {many} tokens (softmax of the matching scores, "
                   f"eq. 4)" + (f" over all {many} at once, shown per {many} and normalised within it"
                                if conc else f", per {many} sentence")
                   + "; share: " + (f"the {text}'s attention mass on the {many}" if conc else
                                    f"the fraction of {text}-vector dimensions this {many} won in the context-wise max"))
    if family == "ABCNN" and config.variant in ("abcnn-1", "abcnn-3"):
        second = task.field_names[1]
        return ExplanationOutput(output=OUTPUT, kind="alignment", rows=inputs[0], columns=inputs[1],
                                 normalize_rows=True,
                                 method="ABCNN attention matrix of the first block (match score 1 / (1 + |h - p|) "
                                        f"between word vectors, eq. 2), each {second} row normalised to sum to 1: "
                                        "it shows which words look alike, not which ones the decision rests on "
                                        "(README, 'Are the weights faithful?')")
    if family == "ACTForClassification" and config.variant == "act":
        return ExplanationOutput(output=OUTPUT, kind="token_weights", rows=inputs[0],
                                 method="ACT global attention: the pooler's softmax weight of each token in the "
                                        "text's representation")
    return None


# --- the graph rewrite -------------------------------------------------------------------------

def _innermost_module(node) -> str:
    """'network.attconv: models.attconv.AttConvLayer' for a node the exporter placed there."""
    namespace = next((p.value for p in node.metadata_props if p.key == "namespace"), "")
    parts = namespace.split("/")
    return parts[-2] if len(parts) >= 2 else ""


def _masked_softmax_output(graph, module_class: str) -> str:
    """The first masked_softmax inside `module_class`: its Softmax, then the Mul that zeroes
    padded positions (models.layers.masked_softmax)."""
    for node in graph.node:
        if node.op_type == "Softmax" and _innermost_module(node).endswith(f": {module_class}"):
            for consumer in graph.node:
                if consumer.op_type == "Mul" and node.output[0] in consumer.input:
                    return consumer.output[0]
            raise ValueError(f"the softmax in {module_class} has no masking Mul after it")
    raise ValueError(f"no softmax inside {module_class} in the graph")


def _first_block_attention(graph) -> str:
    """ABCNN block 0's attention matrix: the masked_fill (Where) closing attention_matrix()."""
    for node in graph.node:
        if node.op_type == "Where" and _innermost_module(node) == "network.blocks.0: models.abcnn.ABCNNBlock":
            return node.output[0]
    raise ValueError("no attention matrix in ABCNN block 0")


def _tensor_name(graph, network: TextClassifier) -> str:
    family = type(network).__name__
    if family == "AttConv":
        return _masked_softmax_output(graph, "models.attconv.AttConvLayer")
    if family == "ABCNN":
        return _first_block_attention(graph)
    return _masked_softmax_output(graph, "models.act.ACTGlobalAttention")


def expected_shape(spec: ExplanationOutput, by_name: dict[str, np.ndarray]) -> tuple[int, ...]:
    """The explanation output's shape for the graph inputs `by_name`."""
    if spec.kind == "token_weights":
        return tuple(by_name[spec.rows].shape)
    rows, columns = by_name[spec.rows], by_name[spec.columns]
    if spec.layout == "evidence_slots":  # (B*K, Lc, Le)
        return (columns.shape[0] * columns.shape[1], rows.shape[1], columns.shape[2])
    if spec.layout == "evidence_concatenated":  # (B, Lc, K*Le)
        return (rows.shape[0], rows.shape[1], columns.shape[1] * columns.shape[2])
    return (rows.shape[0], rows.shape[1], columns.shape[1])


def expose_explanation(path: str | Path, network: TextClassifier) -> ExplanationOutput | None:
    """Add the network's explaining attention to the graph at `path` as output `explanation`
    (in place) and check its shape on inputs of distinct lengths; None (graph untouched) for
    a network without token attention."""
    import onnx
    from onnx import helper

    spec = explanation_spec(network)
    if spec is None:
        return None
    model = onnx.load(str(path))
    graph = model.graph
    if any(o.name == spec.output for o in graph.output):
        raise ValueError(f"{path}: the graph already has an output {spec.output!r}")
    tensor = _tensor_name(graph, network)
    # An Identity gives the exposed tensor the output's name; the graph's own nodes are untouched.
    graph.node.append(helper.make_node("Identity", [tensor], [spec.output], name=f"{spec.output}__expose"))
    rank = 2 if spec.kind == "token_weights" else 3
    axes = [f"{spec.output}_{axis}" for axis in ("batch", "rows", "columns")[:rank]]
    graph.output.append(helper.make_tensor_value_info(spec.output, onnx.TensorProto.FLOAT, axes))
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    _check_shape(path, spec, network.config.task)
    log.info("explanation exposed", extra={"path": str(path), "tensor": tensor, "kind": spec.kind})
    return spec


def _check_shape(path: str | Path, spec: ExplanationOutput, task: str) -> None:
    """On the export's tracing inputs, whose length and count axes all differ, a wrong tensor
    (the other direction's attention, a convolution column axis) has another shape."""
    import onnxruntime as ort

    from export.onnx_graph import example_ids

    # ids below 20: valid for any vocabulary, including the small stand-in networks' vocabularies
    feeds = {name: t.numpy() for name, t in zip(TASKS[task].inputs, example_ids(task, vocab_size=20))}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run([spec.output], feeds)
    expected = expected_shape(spec, feeds)
    if out.shape != expected:
        raise ValueError(f"{path}: the exposed explanation has shape {out.shape}, expected "
                         f"{expected} ({spec.kind}, {spec.layout}); the graph changed shape")


# --- the same tensor from PyTorch --------------------------------------------------------------

def torch_explanation(network: TextClassifier, ids: Sequence[np.ndarray]) -> np.ndarray | None:
    """The tensor `expose_explanation` exposes, computed by the PyTorch network on `ids`."""
    if explanation_spec(network) is None:
        return None
    family = type(network).__name__
    captured: list[torch.Tensor] = []

    if family == "ABCNN":
        block = network.blocks[0]

        def hook(module, args, output):
            x0, mask0, x1, mask1 = args[:4]
            captured.append(attention_matrix(zero_padding(x0, mask0), mask0, zero_padding(x1, mask1), mask1,
                                             module.match_eps))
    else:
        block = network.attconv if family == "AttConv" else network.pooler

        def hook(module, args, output):
            captured.append(output[1])  # AttConvLayer and ACTGlobalAttention return (values, attention)

    handle = block.register_forward_hook(hook)
    try:
        network.eval()
        with torch.inference_mode():
            network._forward_ids(*(torch.from_numpy(np.ascontiguousarray(x)) for x in ids))
    finally:
        handle.remove()
    return captured[0].float().numpy()  # the first call: tx over ty
