"""Rewrite a shipped bundle in place when its checkpoint is gone: more pretrained words, float16
tables, its explaining attention exposed; or turn it back into a checkpoint.

`attserve bundle ...`: the rewrites of export.rewrite, one sub-command each. Imports only typer at module level, like the other command modules (the CLI imports this module
for `--help`; onnx, onnxruntime and torch load inside the commands). Each prints one JSON line
per bundle; a rewrite whose check fails says why and writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from export.import_hf import import_hf  # noqa: F401 - `attserve bundle import-hf`, a bundle of another kind

Bundles = Annotated[
    list[Path],
    typer.Argument(exists=True, file_okay=False, help="Bundle directories, e.g. model_repository/snli-attconv-light."),
]


def extend_vocab(
    bundles: Bundles,
    pretrained_vocab: Annotated[int, typer.Option("--pretrained-vocab", help="Pretrained-only words wanted in all.")],
    vectors: Annotated[Optional[str], typer.Option("--vectors", help="Vector set (default: glove-6b-50d, the recipes' default).")] = None,
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="Dataset/GloVe cache (default: attserve data's).")] = None,
    tuned_rows: Annotated[bool, typer.Option("--tuned-rows", help="A bundle with one fine-tuned table and no buckets (a new model, not an exact extension).")] = False,
) -> None:
    """Give a bundle more pretrained words, in place, without retraining it (logits on the old
    vocabulary stay bit-identical)."""
    from export.rewrite.extend_vocab import extend
    from training.embeddings import DEFAULT_VECTORS, load_glove

    vectors = vectors or DEFAULT_VECTORS
    words, matrix = load_glove(data_dir, vectors=vectors)
    for bundle in bundles:
        typer.echo(json.dumps(extend(bundle, pretrained_vocab, words, matrix, vectors, tuned_rows)))


def fp16_embeddings(bundles: Bundles) -> None:
    """Store a bundle's embedding tables in float16, in place, measured against the float32 graph."""
    from export.rewrite.fp16_embeddings import convert

    for bundle in bundles:
        typer.echo(json.dumps(convert(bundle)))


def to_checkpoint(
    bundle: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="Bundle directory.")],
    recipe: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The recipe the bundle was trained from (network sizes).")],
    out: Annotated[Path, typer.Option("--out", help="Checkpoint directory to write.")],
) -> None:
    """Turn a bundle back into a training checkpoint, checked against the bundle's graph."""
    from export.rewrite.to_checkpoint import convert
    from training.recipes import load_recipe

    typer.echo(json.dumps(convert(bundle, load_recipe(recipe), out), indent=2))


def explanations(bundles: Bundles) -> None:
    """Expose the explaining attention of a bundle's graph, in place (logits stay bit-identical)."""
    from export.rewrite.explanations import convert

    for bundle in bundles:
        typer.echo(json.dumps(convert(bundle)))
