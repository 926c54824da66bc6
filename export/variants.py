"""Optional faster variants of an exported fp32 graph, each measured before it may ship:

  optimized  onnxruntime's own graph optimisation (ORT_ENABLE_EXTENDED) saved offline via
             `SessionOptions.optimized_model_filepath`. Extended fusions use contrib ops of the
             CPU execution provider, so this file is for the CPU provider only.
  fp16       weights and activations in float16 (`onnxruntime.transformers.float16`), fp32
             inputs/outputs kept so the service feeds it unchanged.
  int8       dynamic int8 quantisation of the weights (`onnxruntime.quantization`).

For each: agreement of its predicted labels with the fp32 graph's, accuracy against the gold
labels (when the parity examples carry them), the largest logit difference, and the speed
ratio fp32 time / variant time over the same batches in the same run (one thread each, best
of a few repeats). A variant ships (is kept in the bundle) only when it disagrees with fp32
on fewer than MAX_DISAGREEMENT_POINTS percent of the examples, which also bounds its accuracy
change against the gold labels by the same figure.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from export.parity import cpu_session, run_onnx
from core.bundle import sha256_file

log = logging.getLogger(__name__)

MAX_DISAGREEMENT_POINTS = 0.5
TIMING_REPEATS = 3


def build_optimized(source: Path, target: Path) -> None:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def build_fp16(source: Path, target: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    onnx.save(model, str(target))


def build_int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    # Two repairs the dynamo graphs need before quantize_dynamic:
    # - its value_info annotations trip shape inference ("inferred shape and existing shape
    #   differ"); they are optional, so drop them and let shapes be inferred afresh;
    # - the recommended pre-processing (shape inference + basic, portable ORT optimisation)
    #   folds weight transposes that the quantizer otherwise mangles (ACT: "Incompatible
    #   dimensions" in Add). Symbolic shape inference fails on these graphs; onnx's is enough.
    model = onnx.load(str(source))
    del model.graph.value_info[:]
    stripped, prepared = target.with_suffix(".stripped.onnx"), target.with_suffix(".prepared.onnx")
    onnx.save(model, str(stripped))
    try:
        quant_pre_process(str(stripped), str(prepared), skip_symbolic_shape=True)
        quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8)
    finally:
        stripped.unlink(missing_ok=True)
        prepared.unlink(missing_ok=True)


BUILDERS: dict[str, Callable[[Path, Path], None]] = {
    "optimized": build_optimized,
    "fp16": build_fp16,
    "int8": build_int8,
}


def variant_file(variant: str) -> str:
    return f"model.{variant}.onnx"


def _predict(session: ort.InferenceSession, task: str, batches: Sequence[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, float]:
    """Logits of every batch (concatenated) and the wall time of the pass."""
    start = time.perf_counter()
    logits = [run_onnx(session, task, ids)[0] for ids in batches]
    return np.concatenate(logits).astype(np.float32), time.perf_counter() - start


def measure_variants(
    model_path: str | Path,
    bundle_dir: str | Path,
    task: str,
    batches: Sequence[tuple[np.ndarray, ...]],
    gold: np.ndarray | None = None,
    variants: Sequence[str] = tuple(BUILDERS),
) -> dict[str, Any]:
    """Build each variant of `model_path`, measure it on `batches` against the fp32 graph,
    keep the files that qualify in `bundle_dir` and return the figures (JSON-ready)."""
    model_path, bundle_dir = Path(model_path), Path(bundle_dir)
    if not batches:
        log.warning("no parity examples: variants not measured", extra={"model": str(model_path)})
        return {}
    scratch = Path(tempfile.mkdtemp(prefix="variants-", dir=bundle_dir))
    try:
        paths: dict[str, Path] = {"fp32": model_path}
        report: dict[str, Any] = {}
        for variant in variants:
            target = scratch / variant_file(variant)
            try:
                BUILDERS[variant](model_path, target)
                paths[variant] = target
            except Exception as exc:  # a converter that cannot handle this graph: measured as unavailable
                log.warning("variant not built", extra={"variant": variant, "error": repr(exc)})
                report[variant] = {"shipped": False, "error": repr(exc)}

        sessions = {}
        for variant, path in list(paths.items()):
            try:
                sessions[variant] = cpu_session(path, threads=1)
            except Exception as exc:
                log.warning("variant not loadable", extra={"variant": variant, "error": repr(exc)})
                report[variant] = {"shipped": False, "error": repr(exc)}
        logits: dict[str, np.ndarray] = {}
        best_seconds = {v: float("inf") for v in sessions}
        for v, session in sessions.items():  # warm-up pass, also the logits compared below
            logits[v], _ = _predict(session, task, batches)
        for _ in range(TIMING_REPEATS):  # interleaved, so load from elsewhere hits all alike
            for v, session in sessions.items():
                best_seconds[v] = min(best_seconds[v], _predict(session, task, batches)[1])

        reference = logits["fp32"].argmax(-1)
        examples = len(reference)

        def accuracy(predicted: np.ndarray) -> float | None:
            return None if gold is None else round(100.0 * float(np.mean(predicted == gold)), 3)

        report["fp32"] = {"file": model_path.name, "accuracy": accuracy(reference), "seconds": round(best_seconds["fp32"], 6)}
        for variant in sessions:
            if variant == "fp32":
                continue
            predicted = logits[variant].argmax(-1)
            disagreement = 100.0 * float(np.mean(predicted != reference))
            shipped = disagreement < MAX_DISAGREEMENT_POINTS
            entry: dict[str, Any] = {
                "agreement_with_fp32": round(100.0 - disagreement, 3),
                "accuracy": accuracy(predicted),
                "accuracy_delta_points": None if gold is None else round(accuracy(predicted) - report["fp32"]["accuracy"], 3),
                "max_abs_logit_diff": float(np.max(np.abs(logits[variant] - logits["fp32"]))),
                "speed_ratio": round(best_seconds["fp32"] / best_seconds[variant], 3),
                "seconds": round(best_seconds[variant], 6),
                "shipped": shipped,
            }
            if shipped:
                shutil.move(paths[variant], bundle_dir / variant_file(variant))
                entry["file"] = variant_file(variant)
                entry["sha256"] = sha256_file(bundle_dir / variant_file(variant))
            report[variant] = entry
            log.info("variant measured", extra={"variant": variant, "examples": examples, **entry})
        report["measured_on"] = {"examples": examples, "batches": len(batches), "threads": 1, "repeats": TIMING_REPEATS,
                                 "max_disagreement_points": MAX_DISAGREEMENT_POINTS}
        return report
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
