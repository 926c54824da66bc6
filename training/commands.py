"""`attserve train | evaluate | baseline` (registered by cli/main.py).

Nothing heavy is imported at module level: the CLI imports this module to list its commands,
and the serving image has no torch. Each command imports what it needs when it runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

DataDir = Annotated[
    Optional[Path],
    typer.Option("--data-dir", help="Dataset/GloVe cache (default: $ATTSERVE_DATA_DIR or <repo>/data_cache)."),
]


def _metrics_tables(title: str, metrics: dict[str, Any]) -> list[Any]:
    """A per-class table (with accuracy / macro F1 in its caption) and the confusion matrix."""
    from rich.table import Table

    per_class = Table(title=title, caption=f"accuracy {metrics['accuracy']:.4f}   macro F1 {metrics['macro_f1']:.4f}   examples {metrics['examples']}")
    for column in ("label", "precision", "recall", "F1", "support"):
        per_class.add_column(column, justify="left" if column == "label" else "right")
    for label, row in metrics["per_class"].items():
        per_class.add_row(label, f"{row['precision']:.4f}", f"{row['recall']:.4f}", f"{row['f1']:.4f}", str(row["support"]))

    confusion = Table(title=f"{title}: confusion (rows true, columns predicted)")
    confusion.add_column("true \\ pred")
    for label in metrics["labels"]:
        confusion.add_column(label, justify="right")
    for label, counts in zip(metrics["labels"], metrics["confusion_matrix"]):
        confusion.add_row(label, *(str(c) for c in counts))
    return [per_class, confusion]


def _print_metrics(title: str, metrics: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    for table in _metrics_tables(title, metrics):
        console.print(table)


def train(
    recipe: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Recipe TOML, e.g. recipes/snli-attconv-light.toml.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Checkpoint directory (default: checkpoints/<recipe name>).")] = None,
    threads: Annotated[int, typer.Option(help="torch CPU threads; 0 = every core this process may use.")] = 0,
    epochs: Annotated[Optional[int], typer.Option(help="Override the recipe's epochs.")] = None,
    max_train_examples: Annotated[Optional[int], typer.Option(help="Train on a seeded subset (smoke runs).")] = None,
    max_minutes: Annotated[Optional[float], typer.Option(help="Time budget: stop after the first dev evaluation past it.")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto (CUDA when torch sees a GPU).")] = "cpu",
    glove_file: Annotated[Optional[Path], typer.Option(help="GloVe text file to use instead of the pinned package (recipes with glove = true).")] = None,
    data_dir: DataDir = None,
) -> None:
    """Train a network from a recipe and write a checkpoint (weights, tokenizer, metrics)."""
    from training.recipes import EmbeddingsSection, TrainSection, load_recipe
    from training.trainer import train as run_train
    loaded = load_recipe(recipe)
    changes = {k: v for k, v in {"epochs": epochs, "max_train_examples": max_train_examples, "max_wall_minutes": max_minutes}.items() if v is not None}
    if changes:
        loaded = loaded.model_copy(update={"train": TrainSection.model_validate({**loaded.train.model_dump(), **changes})})
    if glove_file is not None:
        embeddings = EmbeddingsSection.model_validate({**loaded.embeddings.model_dump(), "glove_file": str(glove_file)})
        loaded = loaded.model_copy(update={"embeddings": embeddings})
    out = out or Path("checkpoints") / loaded.name
    result = run_train(loaded, out, progress=progress, threads=threads or None, cache_dir=data_dir, device=device)
    _print_metrics(f"{loaded.name}: dev (best, epoch {result.best_epoch})", result.dev)
    _print_metrics(f"{loaded.name}: test", result.test)
    typer.echo(
        f"checkpoint {result.checkpoint_dir}  wall time {result.wall_time_s:.0f} s  "
        f"{result.train_examples_per_s:.0f} train examples/s  epochs {result.epochs_run}"
        + ("  (stopped early)" if result.stopped_early else "")
    )


def evaluate(
    checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="Checkpoint directory written by `attserve train`.")],
    split: Annotated[str, typer.Option(help="train, dev or test of the checkpoint's recipe dataset.")] = "test",
    batch_size: Annotated[int, typer.Option(help="Examples per forward pass.")] = 256,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the metrics to this JSON file.")] = None,
    data_dir: DataDir = None,
) -> None:
    """Score a checkpoint on a split: accuracy, per-class P/R/F1, macro F1, confusion matrix."""
    from training.trainer import evaluate as run_evaluate
    metrics = run_evaluate(checkpoint, split, batch_size=batch_size, cache_dir=data_dir)
    _print_metrics(f"{checkpoint.name}: {split}", metrics)
    if json_out is not None:
        json_out.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")


def baseline(
    target: Annotated[str, typer.Argument(help="A recipe TOML (its data) or a dataset name: snli, snli-verification, bbc, tweets.")],
    max_train_examples: Annotated[Optional[int], typer.Option(help="Fit on a seeded subset of train.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the metrics to this JSON file.")] = None,
    data_dir: DataDir = None,
) -> None:
    """TF-IDF + logistic regression on the same splits, for comparison with a network."""
    from training.baseline import run_baseline
    from training.recipes import DATASET_TASKS, Recipe, load_recipe
    from training.trainer import load_splits
    if target in DATASET_TASKS:
        from training.datasets import load_dataset

        splits = load_dataset(target, cache_dir=data_dir)
        seed = 0
    else:
        path = Path(target)
        if not path.is_file():
            raise typer.BadParameter(f"{target!r} is neither a recipe file nor one of {sorted(DATASET_TASKS)}")
        recipe: Recipe = load_recipe(path)
        splits = load_splits(recipe, data_dir)
        seed = recipe.train.seed
        max_train_examples = max_train_examples or recipe.train.max_train_examples
    result = run_baseline(splits, max_train_examples=max_train_examples, seed=seed)
    _print_metrics(f"{splits.name} TF-IDF+LR (C={result['C']}): dev", result["dev"])
    _print_metrics(f"{splits.name} TF-IDF+LR (C={result['C']}): test", result["test"])
    typer.echo(f"{result['features']} features, {result['train_examples']} train examples, fit {result['fit_seconds']:.1f} s")
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


__all__ = ["train", "evaluate", "baseline"]
