"""How one training run runs, beside the recipe that says what it trains.

A `Recipe` (training.recipes) is the model and its data, versioned with the repository;
`TrainOptions` is everything a caller chooses per run (threads, device, a data override, the
checkpoints to start from, a deadline): `training.trainer.train(recipe, out_dir, options)`.
Torch-free, so the command line can build one before torch loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from training.examples import DatasetSplits


@dataclass(frozen=True)
class TrainOptions:
    progress: bool = True  # tqdm bars per epoch
    threads: int | None = None  # torch threads; None: every core this process may use
    # overrides the recipe's data (tests, notebooks)
    splits: DatasetSplits | None = None
    # the data cache, or a training pack (training.pack) the splits and vectors are read from
    cache_dir: str | Path | None = None
    # "cpu", "cuda" or "auto"; the checkpoint is the same CPU safetensors file either way
    device: str = "cpu"
    # start from this checkpoint's tokenizer and weights instead of GloVe/random (fine-tuning on
    # changed data); its network config must equal the recipe's
    init_from: str | Path | None = None
    # scores the dev logits (N, C), in dev order, for model selection in place of dev accuracy
    # (e.g. MAP for answer ranking, training.pair_evaluation.selection_metric); for a mixed
    # dataset (`splits.sources`) the default is the mean per-source dev accuracy
    select_metric: Callable[[np.ndarray], float] | None = None
    # a checkpoint of the same network and vocabulary averaged in weight by weight
    # ([train] average_weight); with epochs = 0 the average is the checkpoint
    average_with: str | Path | None = None
    # "auto": bf16 autocast on CUDA, fp32 on CPU; "fp32"; "bf16" (training.acceleration)
    precision: str = "auto"
    compile_network_forward: bool = False  # torch.compile (training.acceleration)
    # ends the run, data preparation included, in that time, keeping the best weights by dev
    # (training.time_budget)
    time_budget_minutes: float | None = None
    loader_worker_count: int | None = None  # DataLoader workers; None: by device (training.acceleration)
