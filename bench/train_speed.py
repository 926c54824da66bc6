"""Training speed of recipes: examples (items) per second of the optimizer steps, on CPU and, where
torch sees one, on CUDA, through the trainer's own step loop (training.trainer.train_one_epoch:
autocast, DataLoader workers, fused optimizer as `attserve train` chooses them per device).

    python -m bench.train_speed recipes/gpu/*.toml --data-dir training-pack [--device all] \
        [--steps 40] [--warmup 5] [--threads 0] [--json bench/results/train-speed/cpu.json]

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
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


def measure(recipe_path: Path, device: str, data_dir: Path | None, steps: int, warmup: int, threads: int,
            precision: str = "auto", compile_forward: bool = False) -> dict[str, Any]:
    """Items/s of `steps` training steps of the recipe on `device` (after `warmup` steps)."""
    import numpy as np
    import torch

    from core.tokenization import TextEncoder
    from models import build_network
    from training.acceleration import autocast_dtype, compile_network, loader_workers
    from training.examples import subsample
    from training.recipes import load_recipe
    from training.tokenizer import trainable_rows
    from training.trainer import (EncodedExamples, LoopState, available_cores, bucketed_batches, init_embeddings_from_glove,
                                  load_splits, load_vectors, make_optimizer, recipe_tokenizer, resolve_device, seed_everything,
                                  train_one_epoch)

    recipe = load_recipe(recipe_path)
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
    needed = (steps + warmup) * cfg.batch_size
    sample = subsample(train_examples, needed, cfg.seed)
    data = EncodedExamples.encode(encoder, sample, list(splits.labels), recipe.limits.max_lengths, recipe.limits.max_evidence)
    prepare_s = time.perf_counter() - tick
    tuned = {"tuned_vocab_size": trainable_rows(tokenizer)} if recipe.embeddings.tuned_channel else {}
    network = build_network(recipe.model.architecture, task=splits.task, vocab_size=encoder.vocab_size,
                            num_labels=len(splits.labels), **recipe.model.overrides, **tuned)
    if vectors is not None:  # which tables train (and so what the optimizer updates) is set here
        init_embeddings_from_glove(network, tokenizer.get_vocab(), recipe.embeddings.trainable, cfg.seed, vectors,
                                   freeze_pretrained=recipe.embeddings.freeze_pretrained,
                                   tuned_channel=recipe.embeddings.tuned_channel)
    network.to(target)
    if compile_forward:
        compile_network(network)
    params = [p for p in network.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, cfg, target.type)
    amp_dtype = autocast_dtype(target.type, precision)
    workers = loader_workers(target.type, threads)
    batches = bucketed_batches(data.costs, cfg.batch_size, cfg.bucket_batches, np.random.default_rng(cfg.seed))
    state = LoopState()
    run = dict(optimizer=optimizer, params=params, cfg=cfg, device=target, progress=False, amp_dtype=amp_dtype, workers=workers)
    train_one_epoch(network, data, batches[:warmup], state=state, **run)
    warm = LoopState()
    train_one_epoch(network, data, batches[warmup:warmup + steps], state=warm, **run)
    if target.type == "cuda":
        torch.cuda.synchronize()
    items_per_s = warm.examples_seen / warm.train_seconds
    return {
        "recipe": recipe.name,
        "architecture": recipe.model.architecture,
        "device": str(target),
        "gpu": torch.cuda.get_device_name(target) if target.type == "cuda" else None,
        "threads": threads,
        "autocast": str(amp_dtype) if amp_dtype else None,
        "loader_workers": workers,
        "compiled": compile_forward,
        "batch_size": cfg.batch_size,
        "steps": warm.step,
        "items_per_s": round(items_per_s, 1),
        "ms_per_step": round(1000 * warm.train_seconds / max(warm.step, 1), 2),
        "train_examples": len(train_examples),
        "epoch_minutes": round(len(train_examples) / items_per_s / 60, 2),
        "steps_per_epoch": math.ceil(len(train_examples) / cfg.batch_size),
        "vocab_size": encoder.vocab_size,
        "trainable_parameters": sum(p.numel() for p in params),
        "prepare_s": round(prepare_s, 1),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }


def main(
    recipes: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, help="Recipe TOMLs.")],
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="A training pack (attserve data pack) or the data cache.")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda, or all (CPU, and CUDA when torch sees a GPU).")] = "all",
    steps: Annotated[int, typer.Option(min=1, help="Timed steps per recipe and device.")] = 40,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed steps first.")] = 5,
    threads: Annotated[int, typer.Option(help="torch CPU threads; 0 = every core this process may use.")] = 0,
    precision: Annotated[str, typer.Option(help="auto (bf16 on CUDA), fp32 or bf16.")] = "auto",
    compile_forward: Annotated[bool, typer.Option("--compile", help="Also time torch.compile'd forward (CUDA).")] = False,
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
            variants = [False, True] if compile_forward and name == "cuda" else [False]
            for compiled in variants:
                result = measure(path, name, data_dir, steps, warmup, threads, precision, compiled)
                results.append(result)
                typer.echo(f"{result['recipe']:24s} {result['device']:6s} {'compiled ' if compiled else ''}"
                           f"{result['items_per_s']:9.1f} items/s  {result['ms_per_step']:8.2f} ms/step  "
                           f"epoch {result['epoch_minutes']:7.2f} min ({result['train_examples']:,} examples)"
                           + (f"  {result['gpu']}" if result["gpu"] else f"  {result['threads']} threads"), err=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
