"""Parity between a PyTorch network and its exported ONNX graph.

Two sets of inputs go through both runtimes, and every output (logits and, for verification,
evidence_scores) is compared element-wise:

  (a) the checkpoint's parity examples (real held-out examples), encoded by the one
      example -> ids path with the bundle's max lengths, in batches of varied sizes;
  (b) random ids at batch sizes 1, 3 and 17, padded to lengths the exporter never traced
      (rows of different lengths in one batch, so padding is exercised), plus an
      evidence-count sweep for verification.

PyTorch runs the ids-only semantics the graph was exported from (`network._forward_ids`,
masks from the pad id), in eval mode; onnxruntime runs the CPU provider.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import onnxruntime as ort
import torch

from export.explanations import torch_explanation
from export.onnx_graph import example_ids
from models.base import PAD_ID, TASKS, TextClassifier
from core.bundle import ExplanationOutput, Parity
from core.tokenization import TextEncoder
from training.batching import encode_examples
from training.examples import Example

log = logging.getLogger(__name__)

RANDOM_BATCH_SIZES = (1, 3, 17)
# Batch sizes the real examples are cut into, cycled (odd sizes, so batches pad differently).
EXAMPLE_BATCH_SIZES = (1, 3, 17, 64)
TOLERANCE = 1e-4


class ParityError(RuntimeError):
    """The ONNX graph does not reproduce the PyTorch network."""


@dataclass
class OutputDiff:
    """Running comparison of torch vs onnxruntime outputs: the logits, and apart from them the
    other outputs (evidence_scores)."""

    max_abs_diff: float = 0.0  # logits
    evidence_max_abs_diff: float | None = None
    argmax_mismatches: int = 0
    examples: int = 0

    def update(self, torch_outputs: Sequence[np.ndarray], onnx_outputs: Sequence[np.ndarray]) -> None:
        for n, (expected, actual) in enumerate(zip(torch_outputs, onnx_outputs, strict=True)):
            if expected.shape != actual.shape:
                raise ParityError(f"output shape {actual.shape} from onnxruntime, {expected.shape} from torch")
            diff = np.abs(expected.astype(np.float64) - actual.astype(np.float64))
            # NaN anywhere is a failure, not a zero difference.
            worst = float(np.max(diff, initial=0.0)) if np.all(np.isfinite(diff)) else float("inf")
            if n == 0:
                self.max_abs_diff = max(self.max_abs_diff, worst)
            else:
                self.evidence_max_abs_diff = max(self.evidence_max_abs_diff or 0.0, worst)
        logits_torch, logits_onnx = torch_outputs[0], onnx_outputs[0]
        chosen_torch = logits_torch.argmax(-1)
        chosen_onnx = logits_onnx.argmax(-1)
        rows = np.arange(len(logits_torch))
        # A flip counts when onnxruntime picks a class torch scores strictly lower; an exact tie
        # in torch's own logits has no single right answer.
        self.argmax_mismatches += int(np.sum(logits_torch[rows, chosen_onnx] < logits_torch[rows, chosen_torch]))
        self.examples += len(logits_torch)


def cpu_session(model_path: str | Path, threads: int = 0) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def run_torch(network: TextClassifier, ids: Sequence[np.ndarray]) -> list[np.ndarray]:
    network.eval()
    with torch.inference_mode():
        out = network._forward_ids(*(torch.from_numpy(np.ascontiguousarray(x)) for x in ids))
    outputs = out if isinstance(out, tuple) else (out,)
    return [o.float().numpy() for o in outputs]


def onnx_feed(task: str, ids: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """The graph's inputs by name: int64, contiguous, in the task's input order."""
    return {name: np.ascontiguousarray(x, dtype=np.int64) for name, x in zip(TASKS[task].inputs, ids, strict=True)}


def run_onnx(session: ort.InferenceSession, task: str, ids: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(o) for o in session.run(list(TASKS[task].outputs), onnx_feed(task, ids))]


def example_batches(
    encoder: TextEncoder,
    examples: Sequence[Example],
    max_lengths: dict[str, int],
    max_evidence: int | None,
    batch_sizes: Sequence[int] = EXAMPLE_BATCH_SIZES,
    task: str | None = None,
) -> list[tuple[np.ndarray, ...]]:
    """The examples cut into consecutive batches whose sizes cycle through `batch_sizes`,
    each encoded (and padded to its own longest text) by `encode_examples` as inputs of `task`
    (the network's; None: the task whose inputs max_lengths names)."""
    batches, start, turn = [], 0, 0
    while start < len(examples):
        size = batch_sizes[turn % len(batch_sizes)]
        batches.append(encode_examples(encoder, examples[start : start + size], max_lengths, max_evidence, task=task))
        start += size
        turn += 1
    return batches


def _traced_sizes(task: str) -> set[int]:
    """Every axis size the exporter traced with: random batches avoid them."""
    return {size for t in example_ids(task, vocab_size=2) for size in t.shape}


def random_ids(
    rng: np.random.Generator, vocab_size: int, batch: int, length: int, count: int | None = None
) -> np.ndarray:
    """(B, L) or (B, K, L) random token ids, each row (text) of random length 1..L padded with
    PAD_ID, at least one row exactly L long. For (B, K, L), example i holds 1..K texts (the
    remaining slots all padding), at least one example all K."""
    shape = (batch, length) if count is None else (batch, count, length)
    ids = rng.integers(1, vocab_size, size=shape, dtype=np.int64)
    lengths = rng.integers(1, length + 1, size=shape[:-1])
    lengths.flat[rng.integers(lengths.size)] = length
    ids[np.arange(length) >= lengths[..., None]] = PAD_ID
    if count is not None:
        present = rng.integers(1, count + 1, size=batch)
        present[rng.integers(batch)] = count
        ids[np.arange(count)[None, :] >= present[:, None]] = PAD_ID
    return ids


def random_batches(
    task: str,
    vocab_size: int,
    max_lengths: dict[str, int],
    max_evidence: int | None,
    seed: int = 0,
    batch_sizes: Sequence[int] = RANDOM_BATCH_SIZES,
) -> list[tuple[np.ndarray, ...]]:
    """Random batches at each batch size, padded once to a short length the exporter never
    saw and once to the bundle's max length; verification also sweeps the evidence count
    from 1 to max_evidence."""
    rng = np.random.default_rng(seed)
    spec = TASKS[task]
    traced = _traced_sizes(task)

    def unseen_length(limit: int) -> int:
        # Short lengths (<= 40) keep the sweep cheap; the max-length batches cover long ones.
        choices = [n for n in range(1, min(limit, 40) + 1) if n not in traced]
        return int(rng.choice(choices)) if choices else limit

    def batch(size: int, length_of, count: int | None) -> tuple[np.ndarray, ...]:
        return tuple(
            random_ids(rng, vocab_size, size, length_of(name), count if rank == 3 else None)
            for name, rank in zip(spec.inputs, spec.input_ranks)
        )

    default_count = max_evidence if spec.list_field is not None else None
    batches = []
    for size in batch_sizes:
        batches.append(batch(size, lambda name: unseen_length(max_lengths[name]), default_count))
        batches.append(batch(size, lambda name: max_lengths[name], default_count))
    if spec.list_field is not None:
        for count in range(1, (max_evidence or 1) + 1):
            batches.append(batch(batch_sizes[len(batch_sizes) // 2], lambda name: unseen_length(max_lengths[name]), count))
    return batches


def check_parity(
    network: TextClassifier,
    model_path: str | Path,
    max_lengths: dict[str, int],
    max_evidence: int | None = None,
    examples: Sequence[Example] = (),
    encoder: TextEncoder | None = None,
    seed: int = 0,
    explanation: ExplanationOutput | None = None,
) -> Parity:
    """Compare `network` with the graph at `model_path` on the parity examples (if any) and on
    random batches; returns the measured figure (raising nothing: the caller decides). With
    `explanation`, the exposed attention is compared with PyTorch's too."""
    task = network.config.task
    session = cpu_session(model_path)
    batches: list[tuple[np.ndarray, ...]] = []
    if examples:
        if encoder is None:
            raise ValueError("parity examples need the bundle's encoder")
        batches += example_batches(encoder, examples, max_lengths, max_evidence, task=task)
    batches += random_batches(task, network.config.vocab_size, max_lengths, max_evidence, seed)

    diff = OutputDiff()
    explanation_diff = 0.0
    for ids in batches:
        diff.update(run_torch(network, ids), run_onnx(session, task, ids))
        if explanation is not None:
            explanation_diff = max(explanation_diff, _explanation_diff(network, session, task, ids, explanation))
    parity = Parity(
        max_abs_diff=diff.max_abs_diff,
        evidence_max_abs_diff=diff.evidence_max_abs_diff,
        argmax_mismatches=diff.argmax_mismatches,
        examples=diff.examples,
        batch_sizes=sorted({len(ids[0]) for ids in batches}),
        explanation_max_abs_diff=explanation_diff if explanation is not None else None,
    )
    log.info(
        "parity measured",
        extra={"task": task, "model": str(model_path), "real_examples": len(examples), **parity.model_dump()},
    )
    return parity


def _explanation_diff(network: TextClassifier, session: ort.InferenceSession, task: str,
                      ids: Sequence[np.ndarray], explanation: ExplanationOutput) -> float:
    expected = torch_explanation(network, ids)
    (actual,) = session.run([explanation.output], onnx_feed(task, ids))
    if expected.shape != actual.shape:
        raise ParityError(f"explanation shape {actual.shape} from onnxruntime, {expected.shape} from torch")
    diff = np.abs(expected.astype(np.float64) - actual.astype(np.float64))
    return float(np.max(diff, initial=0.0)) if np.all(np.isfinite(diff)) else float("inf")


def assert_parity(parity: Parity, tolerance: float = TOLERANCE, evidence_step: float = 0.0) -> None:
    """Raise ParityError unless the logits agree within `tolerance` with no argmax flipped, and the
    explanation and evidence_scores within `tolerance`. `evidence_step` (TextClassifier.
    evidence_score_step) is what one near-tie moves a discrete evidence score by: scores that
    count won dimensions may differ by one step where two slots tie within float rounding."""
    evidence = parity.evidence_max_abs_diff
    if evidence is not None and not evidence <= tolerance + evidence_step:
        raise ParityError(f"onnxruntime's evidence_scores differ from PyTorch's by {evidence:.3g} "
                          f"(tolerance {tolerance:g}, plus {evidence_step:.3g} for one near-tie)")
    explained = parity.explanation_max_abs_diff
    if explained is not None and not explained <= tolerance:
        raise ParityError(f"onnxruntime's explanation output differs from PyTorch's attention by {explained:.3g} "
                          f"(tolerance {tolerance:g})")
    if not parity.max_abs_diff <= tolerance or parity.argmax_mismatches:
        raise ParityError(
            f"onnxruntime does not reproduce PyTorch: max |diff| {parity.max_abs_diff:.3g} "
            f"(tolerance {tolerance:g}), {parity.argmax_mismatches} argmax mismatches "
            f"over {parity.examples} examples"
        )
