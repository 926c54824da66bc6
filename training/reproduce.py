"""`attserve reproduce`: the ABCNN paper's benchmark rows (Yin et al. 2016, Tables 3, 4, 6) and
the AttConv paper's SciTail rows (Yin & Schütze 2018, Table 5), trained here and set beside the
papers' figures (registered by cli/main.py).

A row is (task, model): task wikiqa | msrp | sick | scitail, model one of the task's
TASK_MODELS (`bcnn-one` .. `abcnn-3-two`: variant and number of convolution-pooling blocks;
`attconv-light`, `attconv-advanced`), recipe `recipes/paper/<task>-<model>.toml`. Each row trains the recipe (model selection on dev: MAP
for WikiQA, accuracy otherwise), then scores test twice (training.pair_evaluation):

    network     the network's own output. SICK as in sec. 5.4: a second copy of the network
                trained on NONOVER (the pairs without their shared words), the two combined by
                a logistic regression fitted on dev (the ORIG network alone: `orig_only`)
    +features   a logistic regression over the log-probabilities and the task's hand-made
                features, fitted on dev (all 4 of WikiQA's; a reproducible subset for MSRP and
                SICK, see training.pair_evaluation)

The paper's Tables 3, 4 and 6 are *with* its features; without them it reports only ABCNN-3
two-conv (footnotes 6, 8, 9).

SciTail (Table 5) is the network alone (no feature stage), scored on accuracy. Its test set is
not here, so the figure set beside the paper's test figure is SciTail's official dev, the set the
weights were selected on (REPORTED_SPLIT); `network` keeps the accuracy on the test carved from
train (training.datasets). `--max-train-examples` / `--epochs` give a short run (CI).
Nothing heavy at import time: the CLI imports this module to list its commands.
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Sequence

import typer

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
PAPER_RECIPES = REPO_ROOT / "recipes" / "paper"
TASKS = ("wikiqa", "msrp", "sick", "scitail")
PAPER_MODELS = tuple(f"{v}-{d}" for v in ("bcnn", "abcnn-1", "abcnn-2", "abcnn-3") for d in ("one", "two"))
# Not in the ABCNN paper (nor do the AttConv paper's tables have these tasks): AttConv on the same
# data, vectors and protocol, to compare the two families on equal terms.
EXTRA_MODELS = ("attconv-light", "attconv-advanced")
MODELS = PAPER_MODELS + EXTRA_MODELS
# The AttConv paper's Table 5 rows: its two models and an ABCNN (Table 5 does not say which variant
# or depth; ABCNN-3 one and two blocks)
SCITAIL_MODELS = ("abcnn-3-one", "abcnn-3-two", "attconv-light", "attconv-advanced")
TASK_MODELS: dict[str, tuple[str, ...]] = {"wikiqa": MODELS, "msrp": MODELS, "sick": MODELS, "scitail": SCITAIL_MODELS}
# The split whose figures stand beside the paper's (test, unless the task's test set is not here)
REPORTED_SPLIT: dict[str, str] = {"scitail": "dev"}
DEFAULT_MODELS = ("abcnn-3-two",)

# metric key in the task's metrics -> column name, per task
METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    "wikiqa": (("map", "MAP"), ("mrr", "MRR")),
    "msrp": (("accuracy", "acc"), ("f1", "F1")),
    "sick": (("accuracy", "acc"),),
    "scitail": (("accuracy", "dev acc"),),
}
# Tables 3, 4, 6 (with the paper's features): WikiQA (MAP, MRR), MSRP (acc, F1), SICK (acc)
PAPER_WITH_FEATURES: dict[str, dict[str, dict[str, float]]] = {
    "wikiqa": {
        "bcnn-one": {"map": 0.6629, "mrr": 0.6813}, "bcnn-two": {"map": 0.6593, "mrr": 0.6738},
        "abcnn-1-one": {"map": 0.6810, "mrr": 0.6979}, "abcnn-1-two": {"map": 0.6855, "mrr": 0.7023},
        "abcnn-2-one": {"map": 0.6885, "mrr": 0.7054}, "abcnn-2-two": {"map": 0.6879, "mrr": 0.7068},
        "abcnn-3-one": {"map": 0.6914, "mrr": 0.7127}, "abcnn-3-two": {"map": 0.6921, "mrr": 0.7108},
    },
    "msrp": {
        "bcnn-one": {"accuracy": 0.781, "f1": 0.841}, "bcnn-two": {"accuracy": 0.783, "f1": 0.843},
        "abcnn-1-one": {"accuracy": 0.785, "f1": 0.845}, "abcnn-1-two": {"accuracy": 0.785, "f1": 0.846},
        "abcnn-2-one": {"accuracy": 0.786, "f1": 0.847}, "abcnn-2-two": {"accuracy": 0.788, "f1": 0.847},
        "abcnn-3-one": {"accuracy": 0.788, "f1": 0.848}, "abcnn-3-two": {"accuracy": 0.789, "f1": 0.848},
    },
    "sick": {
        "bcnn-one": {"accuracy": 0.848}, "bcnn-two": {"accuracy": 0.850},
        "abcnn-1-one": {"accuracy": 0.856}, "abcnn-1-two": {"accuracy": 0.858},
        "abcnn-2-one": {"accuracy": 0.857}, "abcnn-2-two": {"accuracy": 0.858},
        "abcnn-3-one": {"accuracy": 0.860}, "abcnn-3-two": {"accuracy": 0.862},
    },
    "scitail": {},  # Table 5 has no feature stage
}
# Without the features the paper reports ABCNN-3 two-conv only (footnotes 6, 8 and 9)
PAPER_WITHOUT_FEATURES: dict[str, dict[str, dict[str, float]]] = {
    "wikiqa": {"abcnn-3-two": {"map": 0.660, "mrr": 0.677}},
    "msrp": {"abcnn-3-two": {"accuracy": 0.751, "f1": 0.827}},
    "sick": {"abcnn-3-two": {"accuracy": 0.8463}},
    # AttConv paper, Table 5 (SciTail test); its ABCNN row (75.8) stands beside both depths
    "scitail": {
        "attconv-light": {"accuracy": 0.781}, "attconv-advanced": {"accuracy": 0.792},
        "abcnn-3-one": {"accuracy": 0.758}, "abcnn-3-two": {"accuracy": 0.758},
    },
}
SETTINGS = ("network", "+features")


def recipe_path(task: str, model: str) -> Path:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {list(TASKS)}")
    if model not in TASK_MODELS[task]:
        raise ValueError(f"unknown model {model!r} for {task}; expected one of {list(TASK_MODELS[task])}")
    return PAPER_RECIPES / f"{task}-{model}.toml"


@dataclass
class RowResult:
    """One trained (task, model): test metrics of the network alone and with the feature stage."""

    task: str
    model: str
    network: dict[str, Any]  # test metrics, network output
    with_features: dict[str, Any] | None  # test metrics, feature stage (None: the task has none)
    dev_network: dict[str, Any]
    train_examples: int
    epochs_run: int
    best_epoch: int
    train_wall_s: float
    row_wall_s: float
    threads: int
    device: str
    command: str
    feature_names: list[str] = field(default_factory=list)
    orig_only: dict[str, Any] | None = None  # SICK: the ORIG network alone, without its NONOVER copy


def command_for(task: str, model: str, epochs: int | None, max_train_examples: int | None) -> str:
    parts = ["attserve", "reproduce", task, "--model", model]
    if epochs is not None:
        parts += ["--epochs", str(epochs)]
    if max_train_examples is not None:
        parts += ["--max-train-examples", str(max_train_examples)]
    return shlex.join(parts)


def run_row(
    task: str,
    model: str,
    out_dir: Path,
    *,
    threads: int = 1,
    epochs: int | None = None,
    max_train_examples: int | None = None,
    max_minutes: float | None = None,
    device: str = "cpu",
    splits: Any = None,
    benchmark_root: Path | None = None,
    cache_dir: Path | None = None,
    recipe_update: Callable[[Any], Any] | None = None,
    progress: bool = False,
) -> RowResult:
    """Train one row's recipe into `out_dir` and score it on test, with and without features.
    `splits` replaces the benchmark's files and `recipe_update` the recipe (tests)."""
    from training.datasets import load_benchmark
    from training.options import TrainOptions
    from training.pair_evaluation import FEATURE_NAMES, FeatureStage, log_softmax, nonover_examples, task_metrics
    from training.recipes import TrainSection, load_recipe

    started = time.perf_counter()
    recipe = load_recipe(recipe_path(task, model))
    changes = {k: v for k, v in {"epochs": epochs, "max_train_examples": max_train_examples, "max_wall_minutes": max_minutes}.items() if v is not None}
    if changes:
        recipe = recipe.model_copy(update={"train": TrainSection.model_validate({**recipe.train.model_dump(), **changes})})
    if recipe_update is not None:
        recipe = recipe_update(recipe)
    splits = splits if splits is not None else load_benchmark(task, benchmark_root)
    labels = list(splits.labels)
    dev_gold = [labels.index(e.label) for e in splits.dev]
    options = TrainOptions(progress=progress, threads=threads, cache_dir=cache_dir, device=device)

    result, dev_logits, test_logits = _train_and_score(recipe, task, splits, Path(out_dir), options)
    train_wall = result.wall_time_s
    orig_only = nonover_logits = None
    if task == "sick":
        # Sec. 5.4: a second copy of the network reads NONOVER (shared words removed) and both
        # feed one LR layer; here that LR is fitted on dev after both are trained.
        nonover = replace(splits, name="sick-nonover", **{part: nonover_examples(getattr(splits, part)) for part in ("train", "dev", "test")})
        nonover_result, nonover_dev, nonover_test = _train_and_score(recipe, task, nonover, Path(f"{out_dir}-nonover"), options)
        nonover_logits = (nonover_dev, nonover_test)
        train_wall += nonover_result.wall_time_s
        orig_only = task_metrics(task, splits.test, labels, test_logits)
        combined = FeatureStage(seed=recipe.train.seed).fit(dev_logits, log_softmax(nonover_dev), dev_gold)
        network_test = combined.scores(test_logits, log_softmax(nonover_test), len(labels))
        network_dev = combined.scores(dev_logits, log_softmax(nonover_dev), len(labels))
    else:
        network_test, network_dev = test_logits, dev_logits
    with_features = None
    if task in FEATURE_NAMES:
        with_features = _with_features_metrics(task, splits, dev_gold, dev_logits, test_logits, nonover_logits, recipe.train.seed)
    row = RowResult(
        task=task,
        model=model,
        network=task_metrics(task, splits.test, labels, network_test),
        with_features=with_features,
        dev_network=task_metrics(task, splits.dev, labels, network_dev),
        train_examples=min(len(splits.train), recipe.train.max_train_examples or len(splits.train)),
        epochs_run=result.epochs_run,
        best_epoch=result.best_epoch,
        train_wall_s=round(train_wall, 2),
        row_wall_s=round(time.perf_counter() - started, 2),
        threads=threads,
        device=device,
        command=command_for(task, model, epochs, max_train_examples),
        feature_names=list(FEATURE_NAMES.get(task, ())),
        orig_only=orig_only,
    )
    (Path(out_dir) / "reproduce.json").write_text(json.dumps(asdict(row), indent=2) + "\n", encoding="utf-8")
    log.info("reproduced", extra={"task": task, "model": model, "network": row.network, "with_features": row.with_features, "row_wall_s": row.row_wall_s})
    return row


def _train_and_score(recipe: Any, task: str, data: Any, folder: Path, options: Any) -> tuple[Any, Any, Any]:
    """Train `recipe` on `data` into `folder`, selecting on the task's dev metric; the result and
    the kept network's (dev logits, test logits)."""
    from core.tokenization import TextEncoder
    from training.checkpoint import TOKENIZER_FILE
    from training.pair_evaluation import selection_metric
    from training.trainer import EncodedExamples, predict_logits, train

    labels = list(data.labels)
    result = train(recipe, folder, replace(options, splits=data, select_metric=selection_metric(task, data.dev, labels)))
    network = result.network.eval()
    encoder = TextEncoder.from_file(folder / TOKENIZER_FILE)

    def logits_of(examples: Sequence[Any]) -> Any:
        encoded = EncodedExamples.encode(encoder, examples, labels, dict(recipe.limits.max_lengths), None, data.task)
        return predict_logits(network, encoded, recipe.train.eval_batch_size)

    return result, logits_of(data.dev), logits_of(data.test)


def _with_features_metrics(task: str, splits: Any, dev_gold: Sequence[int], dev_logits: Any, test_logits: Any,
                           nonover_logits: tuple[Any, Any] | None, seed: int) -> dict[str, Any]:
    """Test metrics of the feature stage: an LR over the network's logits and the task's features
    (for SICK the NONOVER network's log-probabilities too), fitted on dev."""
    import numpy as np

    from training.pair_evaluation import FeatureExtractor, FeatureStage, log_softmax, task_metrics

    labels = list(splits.labels)
    features = FeatureExtractor.fit(task, splits.train)
    dev_features, test_features = features(splits.dev), features(splits.test)
    if nonover_logits is not None:  # the NONOVER network's log-probabilities join the features
        nonover_dev, nonover_test = nonover_logits
        dev_features = np.concatenate([log_softmax(nonover_dev), dev_features], axis=1)
        test_features = np.concatenate([log_softmax(nonover_test), test_features], axis=1)
    stage = FeatureStage(seed=seed).fit(dev_logits, dev_features, dev_gold)
    return task_metrics(task, splits.test, labels, stage.scores(test_logits, test_features, len(labels)))


def table_rows(results: Sequence[RowResult]) -> list[dict[str, Any]]:
    """One line per (row, setting, metric): paper figure (None where the paper gives none),
    ours (on the task's REPORTED_SPLIT), ours - paper. A task without a feature stage has
    network lines only."""
    lines = []
    for r in results:
        network = r.dev_network if REPORTED_SPLIT.get(r.task) == "dev" else r.network
        for setting, ours in zip(SETTINGS, (network, r.with_features)):
            if ours is None:
                continue
            paper_table = PAPER_WITH_FEATURES if setting == "+features" else PAPER_WITHOUT_FEATURES
            paper = paper_table[r.task].get(r.model, {})
            for key, name in METRICS[r.task]:
                figure = paper.get(key)
                lines.append({
                    "task": r.task, "model": r.model, "setting": setting, "metric": name,
                    "paper": figure, "ours": ours[key], "difference": None if figure is None else ours[key] - figure,
                    "train_wall_s": r.train_wall_s, "command": r.command,
                })
    return lines


def _fmt(task: str, value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    if task == "wikiqa":  # MAP/MRR as the paper writes them
        return f"{value:+.4f}" if signed else f"{value:.4f}"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def markdown_table(lines: Sequence[dict[str, Any]]) -> str:
    out = ["| task | model | setting | metric | paper | ours | difference | train time | command |", "|---|---|---|---|---:|---:|---:|---:|---|"]
    for line in lines:
        t = line["task"]
        out.append(
            f"| {t} | {line['model']} | {line['setting']} | {line['metric']} | {_fmt(t, line['paper'])} | {_fmt(t, line['ours'])} | "
            f"{_fmt(t, line['difference'], signed=True)} | {line['train_wall_s']:.0f} s | `{line['command']}` |"
        )
    return "\n".join(out) + "\n"


def reproduce(
    tasks: Annotated[Optional[list[str]], typer.Argument(help="wikiqa, msrp, sick, scitail (default: all four).")] = None,
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", help=f"Repeatable; one of {', '.join(MODELS)}, or 'all' (default: abcnn-3-two). SciTail has {', '.join(SCITAIL_MODELS)}.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the checkpoints (<task>-<model>/) and results.json.")] = Path("runs/reproduce"),
    threads: Annotated[int, typer.Option(help="torch CPU threads.")] = 1,
    epochs: Annotated[Optional[int], typer.Option(help="Override the recipes' epochs (short runs).")] = None,
    max_train_examples: Annotated[Optional[int], typer.Option(help="Train on a seeded subset (short runs).")] = None,
    max_minutes: Annotated[Optional[float], typer.Option(help="Per-row time budget: stop after the first dev evaluation past it.")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
    benchmark_dir: Annotated[Optional[Path], typer.Option("--benchmark-dir", help="Folder with sick/, msrp/, wikiqa/, scitail/ (default: $ATTSERVE_BENCHMARK_DIR or ../shared/data).")] = None,
    markdown: Annotated[Optional[Path], typer.Option("--markdown", help="Also write the table as Markdown to this file.")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = False,
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="GloVe cache (default: $ATTSERVE_DATA_DIR or <repo>/data_cache).")] = None,
) -> None:
    """Train the ABCNN paper's benchmark rows (WikiQA, MSRP, SICK) and the AttConv paper's SciTail
    rows, and print paper vs ours."""
    from rich.console import Console
    from rich.table import Table

    from training.datasets import BenchmarkDataMissing

    tasks = tasks or list(TASKS)
    everything = bool(model and "all" in model)
    models = list(MODELS) if everything else (model or list(DEFAULT_MODELS))
    for name in tasks:
        if name not in TASKS:
            raise typer.BadParameter(f"unknown task {name!r}; expected one of {list(TASKS)}", param_hint="TASKS")
    for name in models:
        if name not in MODELS:
            raise typer.BadParameter(f"unknown model {name!r}; expected one of {list(MODELS)} or 'all'", param_hint="--model")
        if not everything and not any(name in TASK_MODELS[task] for task in tasks):
            raise typer.BadParameter(f"no {', '.join(tasks)} row has model {name!r}", param_hint="--model")
    results = []
    for task in tasks:
        for name in models:
            if name not in TASK_MODELS[task]:
                continue  # e.g. SciTail has no BCNN row
            try:
                results.append(run_row(task, name, out / f"{task}-{name}", threads=threads, epochs=epochs,
                                       max_train_examples=max_train_examples, max_minutes=max_minutes, device=device,
                                       benchmark_root=benchmark_dir, cache_dir=data_dir, progress=progress))
            except BenchmarkDataMissing as exc:
                typer.echo(f"attserve reproduce: {exc}", err=True)
                raise typer.Exit(1) from exc
    lines = table_rows(results)
    table = Table(title="ABCNN (Yin et al. 2016) and AttConv (Yin & Schütze 2018): paper vs ours, test set (SciTail: dev, its test is not here)")
    for column in ("task", "model", "setting", "metric", "paper", "ours", "difference", "train time", "command"):
        table.add_column(column, justify="right" if column in ("paper", "ours", "difference", "train time") else "left")
    for line in lines:
        t = line["task"]
        table.add_row(t, line["model"], line["setting"], line["metric"], _fmt(t, line["paper"]), _fmt(t, line["ours"]),
                      _fmt(t, line["difference"], signed=True), f"{line['train_wall_s']:.0f} s", line["command"])
    Console(width=220).print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"rows": [asdict(r) for r in results], "table": lines}, indent=2) + "\n", encoding="utf-8")
    if markdown is not None:
        markdown.write_text(markdown_table(lines), encoding="utf-8")


__all__ = ["reproduce", "run_row", "table_rows", "markdown_table", "MODELS", "PAPER_MODELS", "EXTRA_MODELS", "SCITAIL_MODELS", "TASK_MODELS",
           "TASKS", "PAPER_WITH_FEATURES", "PAPER_WITHOUT_FEATURES"]
