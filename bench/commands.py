"""`attserve bench`: measure the service against the engine, the HTTP floor, a naive PyTorch
server, a BentoML peer and the paper's speed claims, in one run.

    attserve bench                          # short mode (< 2 min): a tiny model built on the spot
    attserve bench --mode full --checkpoints /work/runs/checkpoints
                                            # the default bundles of model_repository/, peer, knobs

Writes results.json (machine, versions, settings, every figure), results.md (tables) and
throughput.png / p99.png (/ knobs.png) into --out. Needs `wrk` and `taskset` (bench/ci-deps.sh
installs them on Debian) and matplotlib. Nothing heavy is imported until the command runs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer

if TYPE_CHECKING:  # imported when the command runs (nothing heavy at import)
    from bench.suite import BenchOptions

log = logging.getLogger("bench.commands")


def _model_pairs(models: list[str] | None) -> tuple[tuple[str, str], ...] | None:
    if not models:
        return None
    pairs = []
    for spec in models:
        name, sep, dataset = spec.partition(":")
        if not sep or not name or not dataset:
            raise typer.BadParameter(f"{spec!r}: expected BUNDLE:DATASET, e.g. snli-attconv-light:snli")
        pairs.append((name, dataset))
    return tuple(pairs)


def _bench_gpu(out: Path | None, repository: Path, model: list[str] | None, gpu_workers: int,
               duration: int | None, examples: int | None) -> None:
    """`attserve bench --device cuda`: the GPU bench (bench/gpu.py) of the first --model."""
    from bench import gpu

    try:
        gpu.require_cuda()  # before anything is loaded or written
    except gpu.CudaMissing as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    name, dataset = (_model_pairs(model) or (("snli-attconv-light", "snli"),))[0]
    target = out or Path("bench-results/gpu")
    gpu.run(target, repository, name, dataset, gpu_workers, duration or 10, examples or 2000)
    typer.echo(str(target / "results.json"))


def _prepare_workloads(options: BenchOptions, work: Path, say: Callable[[str], None]) -> tuple[list, dict, dict[str, str]]:
    """The workloads of `options` (short mode: the tiny model, built under `work`): each one's
    request bodies and description, and the bundles skipped because they are missing."""
    from bench.suite import DEFAULT_MODELS
    from bench.workloads import TINY_NAME, build_tiny_model, prepare

    workloads, info, skipped = [], {}, {}
    if options.mode == "short":
        say("building the tiny model")
        bundle, checkpoint = build_tiny_model(work / "tiny")
        pairs = ((TINY_NAME, "snli"),)
        locations = {TINY_NAME: (bundle, checkpoint)}
    else:
        pairs = options.models or DEFAULT_MODELS
        locations = {}
        for name, _ in pairs:
            ckpt = options.checkpoints / name if options.checkpoints else None
            locations[name] = (options.repository / name,
                               ckpt if ckpt is not None and (ckpt / "model.safetensors").is_file() else None)
    for name, dataset in pairs:
        bundle, checkpoint = locations[name]
        if not (bundle / "config.json").is_file():
            skipped[name] = f"no bundle at {bundle}"
            log.warning("workload skipped", extra={"workload": name, "reason": skipped[name]})
            continue
        say(f"{name}: loading {dataset} test examples")
        workload, described = prepare(name, dataset, bundle, checkpoint, work / "bodies", options.examples)
        workloads.append(workload)
        info[name] = described
    return workloads, info, skipped


def bench(
    mode: Annotated[str, typer.Option(help="short (tiny model, < 2 min, used by CI) or full (the real bundles).")] = "short",
    out: Annotated[Optional[Path], typer.Option(help="Output directory (default bench-results/short or bench-results).")] = None,
    repository: Annotated[Path, typer.Option(help="Model repository with the bundles (full mode).")] = Path("model_repository"),
    checkpoints: Annotated[Optional[Path], typer.Option(
        help="Directory of checkpoints named like the bundles (naive server, ORT vs PyTorch); full mode.")] = Path("checkpoints"),
    model: Annotated[Optional[list[str]], typer.Option(
        help="BUNDLE:DATASET to measure, repeatable; the first is the primary workload (full mode). "
             "Default: snli-attconv-light:snli, fever-attconv:fever, bbc-act:bbc.")] = None,
    duration: Annotated[Optional[int], typer.Option(help="Seconds per load point (short 2, full 10).")] = None,
    examples: Annotated[Optional[int], typer.Option(help="Test examples per workload (short 256, full 2000).")] = None,
    peer: Annotated[Optional[bool], typer.Option("--peer/--no-peer", help="Run the BentoML peer (default: full mode only).")] = None,
    knobs: Annotated[Optional[bool], typer.Option("--knobs/--no-knobs", help="Run the knob sweep (default: full mode only).")] = None,
    profile: Annotated[Optional[bool], typer.Option("--profile/--no-profile",
                                                    help="py-spy the service under load (default: full mode only).")] = None,
    work: Annotated[Optional[Path], typer.Option(help="Directory for body files, server logs, the tiny model (default: a temp dir).")] = None,
    device: Annotated[str, typer.Option(help="cpu (the suite above) or cuda: the GPU bench (bench/gpu.py) into "
                                             "bench-results/gpu: engine ceiling at grid shapes, engine on the request "
                                             "bodies, the service at c=64/256 with 1 and --gpu-workers workers, on CUDA "
                                             "and the same host's CPU provider.")] = "cpu",
    gpu_workers: Annotated[int, typer.Option(help="--device cuda: the N of the N-worker arms.")] = 8,
) -> None:
    """Benchmark the service (throughput, p50/p95/p99, queue vs inference) against the engine
    ceiling, an HTTP floor, a naive PyTorch server and a BentoML peer."""
    if device not in ("cpu", "cuda"):
        raise typer.BadParameter(f"--device {device!r}: cpu or cuda")
    if device == "cuda":
        _bench_gpu(out, repository, model, gpu_workers, duration, examples)
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from bench import loadgen, report
    from bench.suite import (
        KNOBS_PLOT,
        LATENCY_PLOT,
        RESULTS_FILE,
        TABLE_FILE,
        THROUGHPUT_PLOT,
        BenchOptions,
        Suite,
    )

    if not loadgen.wrk_available():
        typer.echo("wrk not found: install it (Debian: apt-get install wrk, or bash bench/ci-deps.sh as root)", err=True)
        raise typer.Exit(2)
    try:
        options = BenchOptions.for_mode(mode, out=out, duration_s=duration, examples=examples, peer=peer, knobs=knobs,
                                        profile=profile, work=work, repository=repository, checkpoints=checkpoints,
                                        models=_model_pairs(model))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=False) as progress:
        task = progress.add_task("preparing", total=None)
        suite = Suite(options, progress=lambda text: progress.update(task, description=text))
        workloads, info, skipped = _prepare_workloads(options, suite.work,
                                                      lambda text: progress.update(task, description=text))
        if not workloads:
            typer.echo(f"no bundle to benchmark: {skipped}", err=True)
            raise typer.Exit(2)
        results = suite.run(workloads, info, skipped)
        progress.update(task, description="writing results", total=1, completed=1)

    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (options.out / TABLE_FILE).write_text(report.markdown(results), encoding="utf-8")
    report.plots(results, options.out / THROUGHPUT_PLOT, options.out / LATENCY_PLOT, options.out / KNOBS_PLOT)
    log.info("benchmark written", extra={"out": str(options.out), "wall_s": results["wall_s"],
                                         "ratios": {k: v["value"] for k, v in results["ratios"].items()}})
    typer.echo(str(options.out / RESULTS_FILE))
