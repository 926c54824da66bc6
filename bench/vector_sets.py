"""The vector-set comparison of issue 64 (docs/models.md, "Pretrained vector sets"): train the
comparison recipes of recipes/compare a few at a time, then read their logs into the table.

    python -m bench.vector_sets train scitail-vectors-glove100 scitail-vectors-glove100-seed1 ... \
        --out runs/vectors [--data-dir DATA] [--jobs 2]
    python -m bench.vector_sets table runs/vectors [--json bench-results/vectors-2026-11-29.json]

`train` runs each recipe as `nice -n 19 attserve train recipes/compare/NAME.toml --threads 1
--no-progress --out OUT/NAME`, its log in OUT/NAME.log, up to --jobs at once (one thread each:
the figures compare sets, so every run gets the same single core), and appends
{run, exit, wall_s} to OUT/runs.jsonl.

`table` reads the trainer's text log lines ("training", "evaluation", "trained"; service.logs'
TextFormatter: a message, then key=JSON value). A run's dev accuracy is its best dev evaluation
within its recipe's epochs, the checkpoint the recipe keeps; a run counts once the evaluation
of its last budgeted epoch is logged, so a run stopped later, while scoring test and OOD sets,
still counts, and evaluations past the recipe's epochs (a run made before its budget was cut)
are left out. Rows are grouped by task and vector set: mean over seeds and its standard error
(standard deviation / sqrt(runs)). Two kinds of run stand apart from the equal-budget rows, by
their names: `-curve` (dev every `eval_every` steps over one epoch: a learning curve) and
`-full` (the recipe's own epochs, to convergence).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes" / "compare"
TRAINER = "training.trainer:"  # the logger of the lines read

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.split("\n\n")[0])


def log_fields(line: str) -> tuple[str, dict[str, Any]] | None:
    """(message, fields) of one trainer log line, None for any other line. The message is the
    text before the first key=; each value is JSON (a string may hold spaces, an object too)."""
    at = line.find(TRAINER)
    if at < 0:
        return None
    rest = line[at + len(TRAINER):].strip()
    message, _, rest = rest.partition(" ")
    decoder = json.JSONDecoder()
    fields: dict[str, Any] = {}
    while rest:
        key, sep, rest = rest.partition("=")
        if not sep:
            break
        value, end = decoder.raw_decode(rest)
        fields[key.strip()] = value
        rest = rest[end:].lstrip()
    return message, fields


@dataclass
class Run:
    """One comparison run, as its log tells it."""

    name: str
    task: str
    vectors: str
    seed: int
    epochs: int
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    training: dict[str, Any] = field(default_factory=dict)
    trained: dict[str, Any] | None = None

    @property
    def kind(self) -> str:
        return "curve" if self.name.endswith("-curve") else "full" if self.name.endswith("-full") else "budget"

    @property
    def budgeted(self) -> list[dict[str, Any]]:
        return [e for e in self.evaluations if e["epoch"] <= self.epochs]

    @property
    def complete(self) -> bool:
        if self.trained is not None:
            return True
        return self.kind != "full" and any(e["epoch"] == self.epochs for e in self.budgeted)

    @property
    def dev_accuracy(self) -> float:
        return max(e["dev_accuracy"] for e in self.budgeted)

    def record(self) -> dict[str, Any]:
        out = {"run": self.name, "task": self.task, "vectors": self.vectors, "seed": self.seed, "epochs": self.epochs,
               "train_examples": self.training.get("train_examples"),
               "trainable_parameters": self.training.get("trainable_parameters"),
               "vocab_coverage": _round(self.training.get("glove_coverage")),
               "dev_accuracy": round(self.dev_accuracy, 4),
               "train_examples_per_s": (self.trained or {}).get("train_examples_per_s"),
               "wall_s": round((self.trained or {}).get("wall_time_s") or self.budgeted[-1].get("elapsed_s", 0))}
        if self.kind == "curve":
            out["dev_accuracy_by_step"] = {str(e["step"]): round(e["dev_accuracy"], 4) for e in self.budgeted}
        else:
            out["dev_accuracy_by_epoch"] = [round(e["dev_accuracy"], 4) for e in self.budgeted]
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def read_run(log: Path, recipes: Path = RECIPES) -> Run:
    """The run whose trainer log is `log` (named after its recipe in `recipes`)."""
    from training.recipes import load_recipe

    recipe = load_recipe(recipes / f"{log.stem}.toml")
    run = Run(log.stem, recipe.data.dataset or "files", recipe.embeddings.vectors, recipe.train.seed, recipe.train.epochs)
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        parsed = log_fields(line)
        if parsed is None:
            continue
        message, fields = parsed
        if message == "evaluation":
            run.evaluations.append(fields)
        elif message == "training":
            run.training = fields
        elif message == "trained":
            run.trained = fields
    return run


def _set_order(vectors: str) -> tuple:
    """Single sets in VECTOR_SETS' order, then concatenations."""
    from training.embeddings import VECTOR_SETS

    names = list(VECTOR_SETS)
    parts = vectors.split("+")
    return len(parts), [names.index(p) if p in names else len(names) for p in parts], vectors


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    """Per (task, vectors) of the equal-budget runs: runs, mean dev accuracy, its standard error
    over seeds (None with one run), each seed's figure."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in sorted((r for r in runs if r.kind == "budget"), key=lambda r: (r.task, _set_order(r.vectors), r.seed)):
        groups.setdefault((run.task, run.vectors), []).append(run)
    rows = []
    for (task, vectors), group in groups.items():
        accuracies = [r.dev_accuracy for r in group]
        error = statistics.stdev(accuracies) / math.sqrt(len(accuracies)) if len(accuracies) > 1 else None
        rows.append({"task": task, "vectors": vectors, "runs": len(group), "seeds": [r.seed for r in group],
                     "dev_accuracy_mean": round(statistics.mean(accuracies), 4), "standard_error": _round(error),
                     "dev_accuracy_per_seed": [round(a, 4) for a in accuracies]})
    return rows


def markdown(rows: list[dict[str, Any]], runs: list[Run]) -> str:
    """The docs table: one line per (task, vectors), percentages to one decimal."""
    by_group = {(r.task, r.vectors): r for r in runs}
    lines = ["| task | `vectors` | runs | dev accuracy | per seed | vocabulary coverage |", "|---|---|---:|---:|---|---:|"]
    for row in rows:
        mean = f"{100 * row['dev_accuracy_mean']:.1f}"
        mean += f" ± {100 * row['standard_error']:.1f}" if row["standard_error"] is not None else " (one seed)"
        seeds = ", ".join(f"{100 * a:.1f}" for a in row["dev_accuracy_per_seed"])
        coverage = by_group[(row["task"], row["vectors"])].training.get("glove_coverage")
        lines.append(f"| {row['task']} | `{row['vectors']}` | {row['runs']} | {mean} | {seeds} | "
                     + (f"{100 * coverage:.1f}% |" if coverage is not None else "- |"))
    return "\n".join(lines)


@app.command()
def table(
    logs: Annotated[Path, typer.Argument(help="The folder of NAME.log files (train's --out).")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write every run and the summary here.")] = None,
    recipes: Annotated[Path, typer.Option(help="Where the runs' recipes are.")] = RECIPES,
) -> None:
    """Print the comparison table of the finished runs in LOGS (and write them as JSON)."""
    runs, unfinished = [], []
    for log in sorted(logs.glob("*.log")):
        if not (recipes / f"{log.stem}.toml").is_file():
            continue
        run = read_run(log, recipes)
        (runs if run.complete and run.budgeted else unfinished).append(run)
    rows = summarize(runs)
    typer.echo(markdown(rows, runs))
    for run in runs:
        if run.kind == "curve":
            typer.echo(f"{run.name}: dev by step " + ", ".join(f"{e['step']} {100 * e['dev_accuracy']:.1f}" for e in run.budgeted))
        elif run.kind == "full":
            typer.echo(f"{run.name}: dev {100 * run.dev_accuracy:.1f} after {len(run.budgeted)} epochs")
    if unfinished:
        typer.echo("not finished: " + ", ".join(r.name for r in unfinished))
    if json_out is not None:
        records = [r.record() for r in runs]
        json_out.write_text(json.dumps({
            "issue": 64, "date": time.strftime("%Y-%m-%d"),
            "note": ("dev_accuracy: a run's best dev evaluation within its recipe's epochs (the checkpoint the recipe keeps); "
                     "standard_error: the standard deviation over seeds / sqrt(runs). Each run: nice -n 19 attserve train "
                     "recipes/compare/NAME.toml --threads 1 --no-progress, on one thread of a shared 2-core CPU."),
            "summary": rows,
            "runs": [r for r, run in zip(records, runs) if run.kind == "budget"],
            "curves": [r for r, run in zip(records, runs) if run.kind == "curve"],
            "converged": [r for r, run in zip(records, runs) if run.kind == "full"],
            "unfinished": [r.name for r in unfinished]}, indent=1) + "\n", encoding="utf-8")


def train_command(name: str, out: Path, data_dir: Path | None) -> list[str]:
    """The command line of one comparison run (niced, one thread)."""
    command = ["nice", "-n", "19", sys.executable, "-m", "cli.main", "train", str(RECIPES / f"{name}.toml"),
               "--threads", "1", "--no-progress", "--force", "--out", str(out / name)]
    return command + (["--data-dir", str(data_dir)] if data_dir is not None else [])


def _train_one(name: str, out: Path, data_dir: Path | None) -> dict[str, Any]:
    started = time.monotonic()
    with open(out / f"{name}.log", "wb") as log:
        code = subprocess.run(train_command(name, out, data_dir), cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
    record = {"run": name, "exit": code, "wall_s": round(time.monotonic() - started)}
    with open(out / "runs.jsonl", "a", encoding="utf-8") as runs:
        runs.write(json.dumps(record) + "\n")
    typer.echo(json.dumps(record))
    return record


@app.command()
def train(
    names: Annotated[list[str], typer.Argument(help="Recipe names in recipes/compare, run in this order.")],
    out: Annotated[Path, typer.Option("--out", help="Checkpoints, NAME.log files and runs.jsonl go here.")],
    data_dir: Annotated[Optional[Path], typer.Option(help="attserve train's --data-dir.")] = None,
    jobs: Annotated[int, typer.Option(min=1, help="Runs at once (one thread each).")] = 2,
) -> None:
    """Train the comparison recipes NAMES, up to --jobs at a time; exits 1 if any run failed."""
    missing = [n for n in names if not (RECIPES / f"{n}.toml").is_file()]
    if missing:
        raise typer.BadParameter(f"no recipe in {RECIPES} for {', '.join(missing)}")
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        records = list(pool.map(lambda n: _train_one(n, out, data_dir), names))
    failed = [r["run"] for r in records if r["exit"] != 0]
    if failed:
        typer.echo(f"failed: {', '.join(failed)} (their logs: {out})", err=True)
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
