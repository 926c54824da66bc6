"""Training speed of recipes: examples (items) per second of the optimizer steps, on CPU and, where
torch sees one, on CUDA, through the trainer's own step loop (training.trainer.train_one_epoch:
autocast, DataLoader workers, fused optimizer as `attserve train` chooses them per device).

    python -m bench.train_speed recipes/gpu/*.toml --data-dir training-pack [--device all] \
        [--steps 40] [--warmup 5] [--threads 0] [--json bench-results/train-speed/cpu.json]
    python -m bench.train_speed RECIPE --data-dir training-pack --device cpu --ab-precision 8 --steps 4
        # fp32 against bf16 autocast, 8 interleaved rounds of 4 steps each
    python -m bench.train_speed RECIPE --device cpu --vectors glove-6b-100d --vectors wordllama-256
        # the recipe once per vector set (training.embeddings), embedding_dim set to the set's width

Per recipe: its data (from a training pack with --data-dir, else from the sources as `attserve
train` reads them), the vocabulary built from the whole train split (the embedding tables and
the optimizer state are their real size), `warmup` steps untimed, then `steps` timed steps on
the recipe's batch size, in length-bucketed batches as training draws them. Reported: items/s,
ms per step, and the epoch time it implies (train examples / items/s, evaluations excluded).
A measurement, not a test: nothing asserts a speed.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer


@dataclass
class Prepared:
    """A recipe ready for timed steps: its encoded sample, batches, and a network factory."""

    recipe: Any
    device: Any
    threads: int
    data: Any
    batches: list
    train_examples: int
    vocab_size: int
    prepare_s: float
    new_network: Callable[[], tuple[Any, list, Any]]  # -> (network, trainable params, optimizer)


def with_vectors(recipe: Any, vectors: str) -> Any:
    """The recipe starting from another vector set: [embeddings] vectors and [model] embedding_dim."""
    from training.embeddings import vectors_width

    fields = recipe.model_dump()
    fields["embeddings"]["vectors"] = vectors
    fields["model"]["embedding_dim"] = vectors_width(vectors)
    return type(recipe).model_validate(fields)


def prepare(recipe_path: Path, device: str, data_dir: Path | None, batches_needed: int, threads: int,
            vectors: str | None = None) -> Prepared:
    """The recipe's data (pack or sources), its vocabulary from the whole train split (the tables
    and the optimizer state have their real size) and `batches_needed` length-bucketed batches.
    `vectors`: train from that vector set instead of the recipe's (`with_vectors`)."""
    import numpy as np
    import torch

    from core.tokenization import TextEncoder
    from models import build_network
    from training.examples import subsample
    from training.recipes import load_recipe
    from training.tokenizer import trainable_rows
    from training.trainer import (EncodedExamples, available_cores, bucketed_batches, init_embeddings_from_glove, load_splits,
                                  load_vectors, make_optimizer, recipe_tokenizer, resolve_device, seed_everything)

    recipe = load_recipe(recipe_path)
    if vectors is not None:
        recipe = with_vectors(recipe, vectors)
    cfg = recipe.train
    target = resolve_device(device)
    threads = threads or available_cores()
    torch.set_num_threads(threads)
    seed_everything(cfg.seed)
    tick = time.perf_counter()
    splits = load_splits(recipe, data_dir)
    vectors = load_vectors(recipe, data_dir) if recipe.embeddings.glove else None
    train_examples = subsample(splits.train, cfg.max_train_examples, cfg.seed)
    tokenizer = recipe_tokenizer(recipe, train_examples, vectors)
    encoder = TextEncoder(tokenizer)
    sample = subsample(train_examples, batches_needed * cfg.batch_size, cfg.seed)
    data = EncodedExamples.encode(encoder, sample, list(splits.labels), recipe.limits.max_lengths, recipe.limits.max_evidence,
                                 splits.task)
    batches = bucketed_batches(data.costs, cfg.batch_size, cfg.bucket_batches, np.random.default_rng(cfg.seed))
    prepare_s = time.perf_counter() - tick
    tuned = {"tuned_vocab_size": trainable_rows(tokenizer)} if recipe.embeddings.tuned_channel else {}

    def new_network():
        network = build_network(recipe.model.architecture, task=splits.task, vocab_size=encoder.vocab_size,
                                num_labels=len(splits.labels), **recipe.model.overrides, **tuned)
        if vectors is not None:  # which tables train (and so what the optimizer updates) is set here
            init_embeddings_from_glove(network, tokenizer.get_vocab(), recipe.embeddings.trainable, cfg.seed, vectors,
                                       freeze_pretrained=recipe.embeddings.freeze_pretrained,
                                       tuned_channel=recipe.embeddings.tuned_channel)
        network.to(target)
        params = [p for p in network.parameters() if p.requires_grad]
        return network, params, make_optimizer(params, cfg, target.type)

    return Prepared(recipe, target, threads, data, batches, len(train_examples), encoder.vocab_size, prepare_s, new_network)


def measure(recipe_path: Path, device: str, data_dir: Path | None, steps: int, warmup: int, threads: int,
            precision: str = "auto", compile_forward: bool = False, vectors: str | None = None) -> dict[str, Any]:
    """Items/s of `steps` training steps of the recipe on `device` (after `warmup` steps)."""
    import torch

    from training.acceleration import autocast_dtype, compile_network, loader_workers
    from training.trainer import LoopState, train_one_epoch

    ready = prepare(recipe_path, device, data_dir, steps + warmup, threads, vectors)
    cfg, target = ready.recipe.train, ready.device
    network, params, optimizer = ready.new_network()
    if compile_forward:
        compile_network(network)
    amp_dtype = autocast_dtype(target.type, precision)
    workers = loader_workers(target.type, ready.threads)
    run = dict(optimizer=optimizer, params=params, cfg=cfg, device=target, progress=False, amp_dtype=amp_dtype, workers=workers)
    train_one_epoch(network, ready.data, ready.batches[:warmup], state=LoopState(), **run)
    warm = LoopState()
    train_one_epoch(network, ready.data, ready.batches[warmup:warmup + steps], state=warm, **run)
    if target.type == "cuda":
        torch.cuda.synchronize()
    items_per_s = warm.examples_seen / warm.train_seconds
    return {
        "recipe": ready.recipe.name,
        "architecture": ready.recipe.model.architecture,
        "vectors": ready.recipe.embeddings.vectors if ready.recipe.embeddings.glove else None,
        "embedding_dim": ready.recipe.model.overrides.get("embedding_dim"),
        "device": str(target),
        "gpu": torch.cuda.get_device_name(target) if target.type == "cuda" else None,
        "threads": ready.threads,
        "autocast": str(amp_dtype) if amp_dtype else None,
        "loader_workers": workers,
        "compiled": compile_forward,
        "batch_size": cfg.batch_size,
        "steps": warm.step,
        "items_per_s": round(items_per_s, 1),
        "ms_per_step": round(1000 * warm.train_seconds / max(warm.step, 1), 2),
        "train_examples": ready.train_examples,
        "epoch_minutes": round(ready.train_examples / items_per_s / 60, 2),
        "steps_per_epoch": math.ceil(ready.train_examples / cfg.batch_size),
        "vocab_size": ready.vocab_size,
        "trainable_parameters": sum(p.numel() for p in params),
        "prepare_s": round(ready.prepare_s, 1),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }


def precision_ab(recipe_path: Path, device: str, data_dir: Path | None, rounds: int, block: int, threads: int) -> dict[str, Any]:
    """fp32 against bf16 autocast on the same batches' kind, interleaved in one process: blocks of
    `block` steps alternate (ABBA order), so a load that drifts (a shared machine) weighs on both."""
    import torch

    from training.acceleration import autocast_dtype
    from training.trainer import LoopState, train_one_epoch

    warmup = 2
    ready = prepare(recipe_path, device, data_dir, 2 * (warmup + rounds * block), threads)
    cfg, target = ready.recipe.train, ready.device
    variants = {"fp32": (ready.new_network(), None), "bf16": (ready.new_network(), autocast_dtype(target.type, "bf16"))}
    states = {name: LoopState() for name in variants}
    at = 0
    for rnd in range(-1, rounds):  # round -1: warm-up, not counted
        order = list(variants) if rnd % 2 == 0 else list(variants)[::-1]
        for name in order:
            (network, params, optimizer), dtype = variants[name]
            count = warmup if rnd < 0 else block
            train_one_epoch(network, ready.data, ready.batches[at:at + count], optimizer, params, cfg,
                            LoopState() if rnd < 0 else states[name], target, progress=False, amp_dtype=dtype)
            at += count
    if target.type == "cuda":
        torch.cuda.synchronize()
    result = {"recipe": ready.recipe.name, "device": str(target), "threads": ready.threads, "steps_each": rounds * block}
    for name, state in states.items():
        result[f"{name}_items_per_s"] = round(state.examples_seen / state.train_seconds, 1)
    result["bf16_speedup"] = round(result["bf16_items_per_s"] / result["fp32_items_per_s"], 2)
    return result


def main(
    recipes: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, help="Recipe TOMLs.")],
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="A training pack (attserve data pack) or the data cache.")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, or all (CPU, and CUDA when torch sees a GPU).")] = "all",
    steps: Annotated[int, typer.Option(min=1, help="Timed steps per recipe and device.")] = 40,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed steps first.")] = 5,
    threads: Annotated[int, typer.Option(help="torch CPU threads; 0 = every core this process may use.")] = 0,
    precision: Annotated[str, typer.Option(help="auto (bf16 on CUDA), fp32 or bf16.")] = "auto",
    compile_forward: Annotated[bool, typer.Option("--compile", help="Also time torch.compile'd forward (CUDA).")] = False,
    ab_precision: Annotated[int, typer.Option("--ab-precision", min=0, help="Instead: fp32 against bf16 autocast, this many interleaved rounds of --steps steps each.")] = 0,
    vectors: Annotated[Optional[list[str]], typer.Option("--vectors", help="Measure each recipe once per vector set (training.embeddings names, '+' joins), embedding_dim set to its width.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the results to this JSON file.")] = None,
) -> None:
    """Training items/s of each recipe on each device."""
    import torch

    devices = ["cpu", "cuda"] if device == "all" else [device]
    if device == "all" and not torch.cuda.is_available():
        devices = ["cpu"]
    results = []
    for path in recipes:
        for name in devices:
            if ab_precision:
                result = precision_ab(path, name, data_dir, ab_precision, steps, threads)
                results.append(result)
                typer.echo(f"{result['recipe']:24s} {result['device']:6s} fp32 {result['fp32_items_per_s']:8.1f} items/s  "
                           f"bf16 {result['bf16_items_per_s']:8.1f} items/s  x{result['bf16_speedup']:.2f}  "
                           f"({result['steps_each']} steps each, {result['threads']} threads)")
                continue
            variants = [False, True] if compile_forward and name == "cuda" else [False]
            for compiled, vector_set in ((c, v) for c in variants for v in (vectors or [None])):
                result = measure(path, name, data_dir, steps, warmup, threads, precision, compiled, vector_set)
                results.append(result)
                typer.echo(f"{result['recipe']:24s} {result['device']:6s} {'compiled ' if compiled else ''}"
                           + (f"{vector_set} " if vector_set else "")
                           + f"{result['items_per_s']:9.1f} items/s  {result['ms_per_step']:8.2f} ms/step  "
                           f"epoch {result['epoch_minutes']:7.2f} min ({result['train_examples']:,} examples)"
                           + (f"  {result['gpu']}" if result["gpu"] else f"  {result['threads']} threads"), err=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
