"""`attserve train | evaluate | baseline | card | fever-report | recipe-options` (registered by cli/main.py).

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


def _recipe_checkpoint(name: str, relation: str, other: str, option: str) -> Path:
    """checkpoints/<other>, the checkpoint recipe `name` needs, or a usage error saying so."""
    from training.checkpoint import WEIGHTS_FILE

    path = Path("checkpoints") / other
    if not (path / WEIGHTS_FILE).is_file():
        raise typer.BadParameter(f"{name} {relation} the checkpoint of recipe {other!r}, not found at {path}: train that "
                                 "recipe first, or pass its checkpoint directory", param_hint=option)
    return path


def train(
    recipe: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Recipe TOML, e.g. recipes/snli-attconv-light.toml.")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Checkpoint directory (default: checkpoints/<recipe name>).")] = None,
    threads: Annotated[int, typer.Option(help="torch CPU threads; 0 = every core this process may use.")] = 0,
    epochs: Annotated[Optional[int], typer.Option(help="Override the recipe's epochs.")] = None,
    max_train_examples: Annotated[Optional[int], typer.Option(help="Train on a seeded subset (smoke runs).")] = None,
    max_minutes: Annotated[Optional[float], typer.Option(help="Soft time budget: stop after the first dev evaluation past it.")] = None,
    time_budget: Annotated[Optional[float], typer.Option("--time-budget", min=0.01, help="Hard time budget in minutes for the whole run (data preparation, training, evaluation, checkpoint): training ends when the next step, a dev evaluation and the closing metrics would not fit; the best weights by dev so far are kept.")] = None,
    precision: Annotated[str, typer.Option(help="auto (bf16 autocast on CUDA, fp32 on CPU), fp32 or bf16; weights and checkpoint stay fp32.")] = "auto",
    compile_forward: Annotated[bool, typer.Option("--compile", help="torch.compile the network's forward (dynamic shapes); measure its payoff on your GPU first.")] = False,
    loader_workers: Annotated[Optional[int], typer.Option("--loader-workers", min=0, help="DataLoader workers padding batches ahead (default: up to 4 on CUDA, 0 on CPU).")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto (CUDA when torch sees a GPU).")] = "cpu",
    glove_file: Annotated[Optional[Path], typer.Option(help="GloVe text file to use instead of the pinned package (recipes with glove = true).")] = None,
    init_from: Annotated[Optional[Path], typer.Option("--init-from", exists=True, file_okay=False, help="Start from this checkpoint's weights (same recipe network and vocabulary), e.g. to fine-tune on changed data.")] = None,
    average_with: Annotated[Optional[Path], typer.Option("--average-with", exists=True, file_okay=False, help="Average this checkpoint's weights in ([train] average_with; default: checkpoints/<its recipe name>).")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Override the recipe's learning rate.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the checkpoint already at --out.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Train a network from a recipe and write a checkpoint (weights, tokenizer, metrics). With --data-dir
    a training pack (`attserve data pack`) the data, vectors and out-of-domain sets come from it alone."""
    from training.recipes import EmbeddingsSection, TrainSection, load_recipe
    from training.trainer import TrainOptions, train as run_train
    if precision not in ("auto", "fp32", "bf16"):
        raise typer.BadParameter(f"{precision!r}: expected auto, fp32 or bf16", param_hint="--precision")
    loaded = load_recipe(recipe)
    changes = {k: v for k, v in {"epochs": epochs, "max_train_examples": max_train_examples, "max_wall_minutes": max_minutes, "lr": lr}.items() if v is not None}
    if changes:
        loaded = loaded.model_copy(update={"train": TrainSection.model_validate({**loaded.train.model_dump(), **changes})})
    if glove_file is not None:
        embeddings = EmbeddingsSection.model_validate({**loaded.embeddings.model_dump(), "glove_file": str(glove_file)})
        loaded = loaded.model_copy(update={"embeddings": embeddings})
    out = out or Path("checkpoints") / loaded.name
    # as `attserve export`: an existing, non-empty output directory is replaced only with --force
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        typer.echo(f"{out} already exists; pass --force to replace it (or choose another --out)", err=True)
        raise typer.Exit(2)
    # a recipe that starts from (or averages with) another recipe's checkpoint finds it where
    # `train` writes it by default
    if init_from is None and loaded.train.init_from:
        init_from = _recipe_checkpoint(loaded.name, "starts from", loaded.train.init_from, "--init-from")
    if average_with is None and loaded.train.average_with:
        average_with = _recipe_checkpoint(loaded.name, "averages with", loaded.train.average_with, "--average-with")
    from training.trainer import VectorsUnavailable

    try:
        options = TrainOptions(progress=progress, threads=threads or None, cache_dir=data_dir, device=device, init_from=init_from,
                               average_with=average_with, precision=precision, compile_network_forward=compile_forward,
                               time_budget_minutes=time_budget, loader_worker_count=loader_workers)
        result = run_train(loaded, out, options)
    except VectorsUnavailable as exc:  # offline without the GloVe package: say how to go on, no traceback
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    _print_metrics(f"{loaded.name}: dev (best, epoch {result.best_epoch})", result.dev)
    _print_metrics(f"{loaded.name}: test", result.test)
    typer.echo(
        f"checkpoint {result.checkpoint_dir}  wall time {result.wall_time_s:.0f} s  "
        f"{result.train_examples_per_s:.0f} train examples/s  epochs {result.epochs_run}"
        + ("  (stopped early)" if result.stopped_early else "")
        + (f"  best at epoch {result.best_epoch}, step {result.best_step}" if time_budget is not None else "")
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
    ood: Annotated[bool, typer.Option("--ood", help="Also score the fitted model (and a majority guess) on the task's out-of-domain dev sets.")] = False,
    ood_dir: Annotated[Optional[Path], typer.Option("--ood-dir", help="OOD dev sets (default: $ATTSERVE_OOD_DIR or ../shared/data/ood-dev).")] = None,
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
    sets = None
    if ood:
        from training.ood import ood_sets

        sets = ood_sets(splits.task, root=ood_dir)
    result = run_baseline(splits, max_train_examples=max_train_examples, seed=seed, ood=sets)
    _print_metrics(f"{splits.name} TF-IDF+LR (C={result['C']}): dev", result["dev"])
    _print_metrics(f"{splits.name} TF-IDF+LR (C={result['C']}): test", result["test"])
    if "ood_dev" in result:
        _print_ood(f"{splits.name} TF-IDF+LR (C={result['C']}): out-of-domain dev", result["ood_dev"])
    typer.echo(f"{result['features']} features, {result['train_examples']} train examples, fit {result['fit_seconds']:.1f} s")
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def _print_ood(title: str, ood: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("set", "examples", "accuracy", "macro F1", "two-way acc.", "two-way F1", "majority"):
        table.add_column(column, justify="left" if column == "set" else "right")
    for name, m in ood.items():
        two = [f"{m[k]:.4f}" if k in m else "-" for k in ("accuracy_two_way", "macro_f1_two_way")]
        table.add_row(name, str(m["examples"]), f"{m['accuracy']:.4f}", f"{m['macro_f1']:.4f}", *two, f"{m['majority']:.4f}")
    Console().print(table)


def fever_report(
    bundle: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="A verification bundle, e.g. model_repository/fever-attconv.")],
    split: Annotated[str, typer.Option(help="dev or test of the `fever` dataset's split.")] = "dev",
    threads: Annotated[int, typer.Option(help="onnxruntime intra-op threads.")] = 1,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the report to this JSON file.")] = None,
) -> None:
    """A verification bundle on FEVER (training/fever.py): 3-way accuracy with gold evidence (the
    AttConv paper's Table 9 setting), with unrelated evidence for NOT ENOUGH INFO, and among
    retrieved distractors; SUPPORTS vs REFUTES; the gold sentence's evidence_scores rank against
    chance; supported claims with one name or year swapped (REFUTES); the behaviour checks."""
    from training.fever_report import fever_report as run_report

    report = run_report(bundle, split=split, threads=threads)
    for name, metrics in report["views"].items():
        typer.echo(f"{name:15s} " + "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
    typer.echo(f"behaviour checks: {report['behaviour_passed']}/{len(report['behaviour'])} passed")
    for check in report["behaviour"]:
        if check["expected"] != check["got"]:
            typer.echo(f"  failed: {check['claim']!r} with {check['evidence']!r}: expected {check['expected']}, got {check['got']}")
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def card(
    bundle: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="Bundle directory, e.g. model_repository/snli-attconv-light.")],
    dev_split: Annotated[str, typer.Option("--dev-split", help="In-domain split the temperature is fitted on.")] = "dev",
    ood_dir: Annotated[Optional[Path], typer.Option("--ood-dir", help="OOD dev sets (default: $ATTSERVE_OOD_DIR or ../shared/data/ood-dev).")] = None,
    failure_mode: Annotated[Optional[list[str]], typer.Option("--failure-mode", help="A known failure mode (repeatable); replaces the card's list.")] = None,
    failure_modes_file: Annotated[Optional[Path], typer.Option("--failure-modes-file", exists=True, dir_okay=False, help="JSON list of known failure modes; replaces the card's list.")] = None,
    dataset: Annotated[Optional[str], typer.Option(help="Training dataset name (default: from config.json, recipes/<name>.toml or the data checksums).")] = None,
    recipe: Annotated[Optional[Path], typer.Option("--recipe", dir_okay=False, help="The recipe the model was trained with: the card scores its [data] (your own dev/test files, or its named dataset).")] = None,
    max_ood_examples: Annotated[Optional[int], typer.Option(help="Score a fixed-seed subset of each OOD set (smoke runs).")] = None,
    threads: Annotated[int, typer.Option(help="onnxruntime intra-op threads.")] = 1,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the card, do not write config.json.")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the card to this JSON file.")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    data_dir: DataDir = None,
) -> None:
    """Model card: in-domain and out-of-domain dev figures, unknown-token shares and a fitted
    temperature (ECE before/after), written as `card` into the bundle's config.json."""
    from training.card import build_card, write_card

    modes: Optional[list[str]] = None
    if failure_modes_file is not None:
        loaded = json.loads(failure_modes_file.read_text(encoding="utf-8"))
        if not isinstance(loaded, list) or not all(isinstance(x, str) for x in loaded):
            raise typer.BadParameter(f"{failure_modes_file}: expected a JSON list of strings")
        modes = loaded
    if failure_mode:
        modes = [*(modes or []), *failure_mode]
    from core.bundle import BundleError

    try:
        result = build_card(bundle, dev_split=dev_split, ood_dir=ood_dir, failure_modes=modes, dataset=dataset,
                            cache_dir=data_dir, max_ood_examples=max_ood_examples, threads=threads, progress=progress,
                            recipe=recipe)
    except (ValueError, OSError, RuntimeError, BundleError) as exc:  # no data, wrong data, bad recipe: one line, no traceback
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(2) from None
    test = result["in_domain"]["test"]
    if "map" in test:  # a reranker
        typer.echo(f"in-domain test MAP {test['map']:.4f}  MRR {test['mrr']:.4f}  ({test['questions']} questions)")
    else:
        if result["ood_dev"]:
            _print_ood(f"{bundle.name}: out-of-domain dev", result["ood_dev"])
        calibration = result["calibration"]
        typer.echo(
            f"in-domain test accuracy {test['accuracy']:.4f}  temperature {calibration['temperature']:.4f}  "
            + "  ".join(f"ECE {k} {calibration['ece_before'][k]:.4f}->{calibration['ece_after'][k]:.4f}" for k in calibration["ece_before"])
        )
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if dry_run:
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(f"card written to {write_card(bundle, result)}")


def recipe_options(
    out: Annotated[Optional[Path], typer.Option("--out", "-o", dir_okay=False, help="Write the reference to this file (e.g. docs/recipes.md) instead of printing it.")] = None,
) -> None:
    """Every recipe option (each table's keys, types, defaults, descriptions, and the network
    config fields of every architecture) as markdown, generated from the recipe schema: docs/recipes.md."""
    from training.recipes import options_markdown

    text = options_markdown()
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {out}")


__all__ = ["train", "evaluate", "baseline", "card", "fever_report", "recipe_options"]
