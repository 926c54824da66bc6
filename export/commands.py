"""`attserve export CHECKPOINT --out model_repository/NAME`.

Imports nothing heavy at module level (torch, onnx and the models load inside the command),
so the CLI stays fast and the serving image, which has no torch, can still list commands.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

log = logging.getLogger(__name__)


def export(
    checkpoint: Path = typer.Argument(
        ..., exists=True, file_okay=False, dir_okay=True, help="Checkpoint directory written by `attserve train`."
    ),
    out: Path = typer.Option(..., "--out", help="Bundle directory to write, e.g. model_repository/nli-attconv-advanced."),
    version: Optional[str] = typer.Option(
        None, "--version", help="Bundle version (default: first 12 hex digits of model.onnx's sha256)."
    ),
    variants: bool = typer.Option(
        False, "--variants/--no-variants", help="Also build, measure and (if accurate) ship optimized/fp16/int8 graphs."
    ),
    force: bool = typer.Option(False, "--force", help="Replace the bundle already at --out (a shipped one included)."),
    pretrained_vocab: Optional[int] = typer.Option(
        None, "--pretrained-vocab", min=0,
        help="Keep only the first N pretrained-only words (frozen GloVe rows; the rest hash into the OOV buckets): "
        "a smaller bundle without retraining. Default: the recipe's [embeddings] export_pretrained_vocab, else all.",
    ),
) -> None:
    """Export a checkpoint to an ONNX bundle (model.onnx, tokenizer.json, config.json) after
    checking that onnxruntime reproduces PyTorch within 1e-4."""
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        typer.echo(f"{out} already exists; pass --force to replace it (or choose another --out)", err=True)
        raise typer.Exit(2)
    from rich.console import Console
    console = Console()

    from export.bundle import write_bundle

    # torch's ONNX exporter warns that torchvision's ops cannot be registered, on every export;
    # no network here uses them (torch configures its loggers on import, so set this after it)
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    from export.parity import ParityError
    from core.bundle import BundleError, load_bundle

    import json
    import tempfile

    from training.checkpoint import CONFIG_FILE, cut_pretrained_words

    if pretrained_vocab is None:
        recipe = json.loads((checkpoint / CONFIG_FILE).read_text(encoding="utf-8")).get("recipe") or {}
        pretrained_vocab = (recipe.get("embeddings") or {}).get("export_pretrained_vocab")
        # the recipe's figure is a most: a checkpoint with no more words than that (one fine-tuned from
        # a bundle, which the export had cut already) is exported as it is
        if pretrained_vocab is not None:
            from tokenizers import Tokenizer

            from training.checkpoint import TOKENIZER_FILE
            from training.tokenizer import pretrained_count

            if pretrained_vocab >= pretrained_count(Tokenizer.from_file(str(checkpoint / TOKENIZER_FILE))):
                pretrained_vocab = None
    scratch = tempfile.TemporaryDirectory()
    if pretrained_vocab is not None:
        checkpoint = cut_pretrained_words(checkpoint, pretrained_vocab, Path(scratch.name) / checkpoint.name)
    with scratch, console.status("exporting", spinner="dots") as status:
        try:
            path = write_bundle(checkpoint, out, version=version, variants=variants, step=status.update)
        except (ParityError, BundleError) as exc:
            log.error("export failed", extra={"checkpoint": str(checkpoint), "out": str(out), "error": str(exc)})
            console.print(f"[red]export failed, nothing written:[/red] {exc}")
            raise typer.Exit(1) from None
    config = load_bundle(path).config
    parity = config.parity
    console.print(
        f"[green]wrote {path}[/green] ({config.name} {config.version}, {config.task}, {len(config.labels)} labels)\n"
        f"parity: max |onnxruntime - torch| = {parity.max_abs_diff:.2e} over {parity.examples} examples, "
        f"batch sizes {parity.batch_sizes}, argmax mismatches {parity.argmax_mismatches}"
    )
    for name, entry in config.metrics.get("variants", {}).items():
        if name in ("fp32", "measured_on"):
            continue
        if "speed_ratio" not in entry:
            console.print(f"variant {name}: not built ({entry.get('error')})")
            continue
        console.print(
            f"variant {name}: agreement {entry['agreement_with_fp32']}%, accuracy delta "
            f"{entry['accuracy_delta_points']} points, speed x{entry['speed_ratio']}, "
            f"{'shipped' if entry['shipped'] else 'not shipped'}"
        )
