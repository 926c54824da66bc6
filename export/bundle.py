"""Checkpoint -> self-describing bundle directory: `model.onnx`, `tokenizer.json` (copied
unchanged) and `config.json` (written through `core.bundle.BundleConfig`, the one schema).

Everything is written into a hidden staging directory beside the target and renamed into
place only once the graph passed its parity check and the finished bundle passed
`load_bundle` + `check_output_width`; a failed export leaves no bundle directory behind (and
an existing bundle at the target untouched).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import onnx
import onnxruntime
import torch

from export.explanations import expose_explanation
from export.onnx_graph import OPSET, export_onnx, round_embeddings, store_embeddings
from export.parity import TOLERANCE, assert_parity, check_parity, cpu_session, example_batches
from models import TASKS, TextClassifier, architectures, serve_as
from core.bundle import (
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    BundleConfig,
    BundleError,
    ExplanationOutput,
    Parity,
    check_output_width,
    load_bundle,
    sha256_file,
)
from core.tokenization import TextEncoder
from training.batching import label_ids
from training.checkpoint import load_checkpoint, load_examples
from training.checkpoint import TOKENIZER_FILE as CHECKPOINT_TOKENIZER_FILE
from training.examples import Example

log = logging.getLogger(__name__)

Step = Callable[[str], None]


def logits_width(model_path: str | Path) -> int | str | None:
    """The graph's logits width as onnxruntime reports it (an int when static)."""
    return cpu_session(model_path).get_outputs()[0].shape[-1]


@contextmanager
def staged(out_dir: Path) -> Iterator[Path]:
    """A directory to write a bundle into, published as `out_dir` when the block ends (an
    atomic rename) and removed, with nothing published, when it raises."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # A hidden sibling (same filesystem, so the final rename is atomic), created under the
    # umask like any directory: mkdtemp's 0700 would make the bundle unreadable to the service user.
    staging = out_dir.parent / f".{out_dir.name}.{uuid.uuid4().hex[:12]}.partial"
    staging.mkdir()
    try:
        yield staging
        _publish(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _write_graph(network: TextClassifier, staging: Path, tokenizer_path: str | Path,
                 embedding_dtype: str) -> tuple[Path, Any]:
    """model.onnx (embedding tables stored as `embedding_dtype`), its explanation output, and
    the tokenizer beside it; returns the graph's path and the explanation's spec (None if none)."""
    shapes = round_embeddings(network, embedding_dtype)
    model_path = export_onnx(network, staging / MODEL_FILE)
    if shapes:
        store_embeddings(model_path, shapes, embedding_dtype)
    explanation = expose_explanation(model_path, network)
    shutil.copyfile(tokenizer_path, staging / TOKENIZER_FILE)
    return model_path, explanation


def _bundle_config(staging: Path, model_path: Path, task: str, parity: Parity, explanation: ExplanationOutput | None, *, name: str,
                   version: str | None, architecture: str, description: str, labels: Sequence[str],
                   max_lengths: dict[str, int], max_evidence: int | None, metrics: dict[str, Any],
                   data_checksums: dict[str, str] | None) -> BundleConfig:
    """config.json's contents for the graph and tokenizer staged in `staging` (see
    write_bundle_from_network for the arguments)."""
    model_sha256 = sha256_file(model_path)
    return BundleConfig(
        name=name,
        version=version or model_sha256[:12],
        task=task,
        architecture=architecture,
        description=description or architectures()[architecture].description,
        labels=list(labels) if TASKS[task].labelled else [],
        inputs=list(TASKS[task].inputs),
        outputs=list(TASKS[task].outputs),
        max_lengths=dict(max_lengths),
        max_evidence=max_evidence if TASKS[task].list_field is not None else None,
        metrics=metrics,
        data_checksums=dict(data_checksums or {}),
        parity=parity,
        opset=OPSET,
        onnx_version=onnx.__version__,
        onnxruntime_version=onnxruntime.__version__,
        torch_version=torch.__version__,
        model_sha256=model_sha256,
        tokenizer_sha256=sha256_file(staging / TOKENIZER_FILE),
        explanation=explanation,
    )


def write_bundle_from_network(
    network: TextClassifier,
    architecture: str,
    name: str,
    labels: Sequence[str],
    tokenizer_path: str | Path,
    out_dir: str | Path,
    max_lengths: dict[str, int],
    max_evidence: int | None = None,
    metrics: dict[str, Any] | None = None,
    data_checksums: dict[str, str] | None = None,
    examples: Sequence[Example] | None = None,
    version: str | None = None,
    description: str = "",
    variants: bool = False,
    tolerance: float = TOLERANCE,
    step: Step | None = None,
    embedding_dtype: str = "float32",
) -> Path:
    """Export `network` into the bundle directory `out_dir` and return it.

    `examples` are real held-out examples for the parity check (and the variant accuracy
    figures); random batches are always checked too. `version` defaults to the first 12 hex
    digits of model.onnx's sha256, so re-exporting identical weights keeps the version.
    Raises `ParityError` / `BundleError` (writing nothing) when the graph or config is wrong.
    """
    step = step or (lambda _: None)
    out_dir = Path(out_dir)
    network.eval()
    task = network.config.task
    encoder = TextEncoder.from_file(tokenizer_path)
    if encoder.vocab_size > network.config.vocab_size:
        raise BundleError(
            f"{tokenizer_path}: tokenizer has {encoder.vocab_size} ids but the network embeds only "
            f"{network.config.vocab_size}"
        )
    examples = list(examples or [])
    metrics = dict(metrics or {})

    with staged(out_dir) as staging:
        step("exporting ONNX graph")
        model_path, explanation = _write_graph(network, staging, tokenizer_path, embedding_dtype)

        step("checking parity with PyTorch")
        parity = check_parity(network, model_path, max_lengths, max_evidence, examples, encoder,
                              explanation=explanation)
        assert_parity(parity, tolerance, network.evidence_score_step())

        if variants:
            step("building and measuring variants")
            from export.variants import measure_variants

            batches = example_batches(encoder, examples, max_lengths, max_evidence, task=task) if examples else []
            gold = label_ids(examples, labels) if examples else None
            metrics["variants"] = measure_variants(model_path, staging, task, batches, gold)

        step("writing config.json")
        config = _bundle_config(staging, model_path, task, parity, explanation, name=name, version=version,
                                architecture=architecture, description=description, labels=labels,
                                max_lengths=max_lengths, max_evidence=max_evidence, metrics=metrics,
                                data_checksums=data_checksums)
        (staging / CONFIG_FILE).write_text(config.model_dump_json(indent=2) + "\n", encoding="utf-8")

        # The service's own checks, on the finished files, before anything is published.
        check_output_width(load_bundle(staging), logits_width(model_path))
    log.info(
        "bundle written",
        extra={"bundle": str(out_dir), "bundle_name": config.name, "version": config.version, "task": task,
               "max_abs_diff": parity.max_abs_diff, "parity_examples": parity.examples},
    )
    return out_dir


def write_bundle(
    checkpoint_dir: str | Path,
    out_dir: str | Path,
    version: str | None = None,
    name: str | None = None,
    variants: bool = False,
    step: Step | None = None,
) -> Path:
    """Export a checkpoint (training.checkpoint format) into the bundle `out_dir`.

    The bundle's name defaults to the directory name (the model repository addresses models
    by directory), the labels, limits, metrics and data checksums come from the checkpoint,
    and its saved parity examples drive the parity check."""
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    (step or (lambda _: None))("loading checkpoint")
    network, meta = load_checkpoint(checkpoint_dir)
    max_lengths, max_evidence, examples = meta.max_lengths, meta.max_evidence, load_examples(checkpoint_dir)
    served = (meta.recipe or {}).get("serve_as")
    if served:
        # the recipe serves the trained network as another task (models.serve_as): its limits
        # follow the trained inputs in order unless the recipe names them; the parity examples
        # are of the trained task, so the served graph is checked on random batches alone
        trained = TASKS[network.config.task]
        network = serve_as(network, served["task"])
        max_lengths = served.get("max_lengths") or {new: meta.max_lengths[old] for new, old in
                                                    zip(TASKS[served["task"]].inputs, trained.inputs, strict=True)}
        max_evidence, examples = served.get("max_evidence"), []
    return write_bundle_from_network(
        network,
        architecture=meta.architecture,
        name=name or out_dir.name,
        labels=meta.labels,
        tokenizer_path=checkpoint_dir / CHECKPOINT_TOKENIZER_FILE,
        out_dir=out_dir,
        max_lengths=max_lengths,
        max_evidence=max_evidence,
        metrics=meta.metrics,
        data_checksums=meta.data_checksums,
        examples=examples,
        version=version,
        description=meta.description,
        variants=variants,
        step=step,
        # a recipe may ask for its (large, pretrained-vocabulary) embedding tables in float16 or int8
        embedding_dtype=(meta.recipe or {}).get("embeddings", {}).get("export_dtype") or "float32",
    )


def _publish(staging: Path, out_dir: Path) -> None:
    """Rename the finished staging directory to `out_dir`, replacing an existing bundle: the
    old one is renamed aside first and restored if the final rename fails."""
    if not out_dir.exists():
        os.replace(staging, out_dir)
        return
    retired = out_dir.parent / f".{out_dir.name}.{uuid.uuid4().hex[:12]}.old"
    os.replace(out_dir, retired)
    try:
        os.replace(staging, out_dir)
    except BaseException:
        os.replace(retired, out_dir)
        raise
    shutil.rmtree(retired, ignore_errors=True)
