"""`attserve score`: label a file with a served model, in-process (scoring.files), or on a
Ray cluster (scoring.on_ray, `--ray ADDRESS`)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

# what the command imports beyond the serving install: `.venv/bin/pip install -e '.[score]'` ('.[ray]' for --ray)
SCORE_MODULES = ("pyarrow", "tqdm")


def parse_columns(spec: str) -> dict[str, str]:
    """"premise=sentence1,hypothesis=sentence2" -> {"premise": "sentence1", ...}."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        field, sep, column = part.partition("=")
        if not sep or not field.strip() or not column.strip():
            raise typer.BadParameter(f"{part!r}: expected FIELD=COLUMN", param_hint="--columns")
        out[field.strip()] = column.strip()
    return out


def find_bundle(model: str, repositories: list[Path]) -> Path:
    for root in repositories:
        if (root / model / "config.json").is_file():
            return root / model
    found = sorted(p.name for root in repositories if root.is_dir() for p in root.iterdir() if (p / "config.json").is_file())
    typer.echo(f"attserve score: no model {model!r} in {', '.join(map(str, repositories))} (models: {found})", err=True)
    raise typer.Exit(2)


def score(
    input: Path = typer.Argument(..., help="A .jsonl, .csv or .parquet file, one input a row."),
    output: Path = typer.Option(..., "-o", "--output", help="Where the scored rows go: the input's format, with the "
                                "answer's columns added (with --ray: a folder of files)."),
    model: str = typer.Option(..., "--model", help="The bundle's name (a folder of the model repository)."),
    model_repository: Optional[str] = typer.Option(None, "--model-repository", help="Bundle folders, comma-separated "
                                                   "(default: ATTSERVE_MODEL_REPOSITORY, else ./model_repository)."),
    columns: str = typer.Option("", "--columns", help="The input's column of each task field, e.g. "
                                "premise=sentence1,hypothesis=sentence2 (default: the field names)."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Rows per engine request and batch."),
    chunk_rows: int = typer.Option(4096, "--chunk-rows", min=1, help="Rows read, scored and committed together "
                                   "(a resumed run redoes at most this many)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="onnxruntime intra-op threads "
                                          "(default: the CPUs available)."),
    prefix: str = typer.Option("", "--prefix", help="Put before each answer column's name (e.g. pred_)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the output and forget an unfinished run."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="The progress bar (rows/s, ETA)."),
    max_skipped_share: float = typer.Option(0.1, "--max-skipped-share", min=0.0, max=1.0, help="Exit 3 (the output "
                                            "written all the same) when more than this share of the rows is "
                                            "skipped, or none is scored."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Run on this Ray cluster instead (an address, or 'local' "
                                      "for a cluster started here): a ray.data pipeline, one session per actor."),
    actors: int = typer.Option(1, "--actors", min=1, help="With --ray: scoring actors, each with one onnxruntime "
                               "session."),
    actor_cpus: float = typer.Option(1.0, "--actor-cpus", min=0.1, help="With --ray: CPUs per actor (its "
                                     "intra-op threads)."),
) -> None:
    """Score a JSONL, CSV or Parquet file with a model, in-process (no server): resumable, bad rows reported and skipped."""
    from scoring.files import ScoringError, skipped_verdict

    missing = [m for m in SCORE_MODULES + (("ray",) if ray else ()) if importlib.util.find_spec(m) is None]
    if missing:
        extra = "ray" if ray else "score"
        # the running interpreter's pip: a bare `pip` may be the system's, not the venv's
        typer.echo(f"attserve score needs {shlex.quote(sys.executable)} -m pip install -e '.[{extra}]'; not importable "
                   f"here: {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    from service.settings import Settings

    repositories = ([Path(p) for p in model_repository.split(",") if p] if model_repository
                    else list(Settings().model_repository) if os.environ.get("ATTSERVE_MODEL_REPOSITORY")
                    else [Path("model_repository")])
    bundle = find_bundle(model, repositories)
    mapping = parse_columns(columns)
    try:
        if ray:
            from scoring.on_ray import score_with_ray

            result = score_with_ray(input, output, bundle, address=ray, actors=actors, actor_cpus=actor_cpus,
                                    columns=mapping, batch_size=batch_size, prefix=prefix, overwrite=overwrite)
            typer.echo(json.dumps(result))
            return
        from scoring.files import score_file

        summary = score_file(input, output, bundle, columns=mapping, batch_size=batch_size, chunk_rows=chunk_rows,
                             threads=threads, prefix=prefix, overwrite=overwrite, progress_bar=progress)
    except ScoringError as exc:
        typer.echo(f"attserve score: {exc}", err=True)
        raise typer.Exit(2) from None
    rows = summary.rows_read - summary.resumed_from
    typer.echo(json.dumps({"output": str(summary.output), "scored": summary.scored, "skipped": summary.bad,
                           "errors": str(summary.errors) if summary.errors else None,
                           "resumed_from_row": summary.resumed_from, "seconds": round(summary.seconds, 3),
                           "rows_per_s": round(rows / summary.seconds, 1) if summary.seconds else None}))
    verdict = skipped_verdict(summary, max_skipped_share)
    if verdict:
        typer.echo(f"attserve score: {verdict}", err=True)
        raise typer.Exit(3)
