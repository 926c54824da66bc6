"""What the benchmark sends: real test-split examples, written once as request-body files the
load generators cycle through, and the tiny model the short mode measures.

A workload is one bundle plus the dataset of its task: SNLI test pairs for entailment, SNLI
claims with 1-5 evidence sentences for verification, BBC (or tweet) test texts for
classification. Each body file holds one JSON request per line:

    single.jsonl    {"premise": ..., "hypothesis": ...}            (our API, one input)
    batch.jsonl     {"inputs": [32 inputs]}                         (our API, 32 inputs)
    peer.jsonl      {"inputs": [one input]}                         (the BentoML peer's API)
    explain.jsonl   {"premise": ..., "hypothesis": ..., "explain": true}  (one input, with its explanation)
    parity_examples.jsonl  the examples themselves, in the checkpoint module's JSONL format
                           (read back with training.checkpoint.load_examples)

Examples keep their dataset order (the test split as the dataset loader fixes it), so the
length distribution is the test set's.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from core.tasks import TASKS

log = logging.getLogger("bench.workloads")

# Inputs per request in the "batch" request form (32-item `inputs` requests).
BATCH_INPUTS = 32
ENDPOINT_OF_TASK = {name: task.endpoint for name, task in TASKS.items()}


@dataclass(frozen=True)
class Workload:
    """One bundle under load: where its files are and what it is fed."""

    name: str  # bundle name
    task: str
    dataset: str
    bundle: Path  # bundle directory (model.onnx, tokenizer.json, config.json)
    checkpoint: Path | None  # the PyTorch checkpoint the bundle came from (naive server, ORT vs torch)
    bodies: Path  # directory with single.jsonl, batch.jsonl, peer.jsonl, parity_examples.jsonl

    @property
    def endpoint(self) -> str:
        return ENDPOINT_OF_TASK[self.task]

    @property
    def repository(self) -> Path:
        return self.bundle.parent

    def describe(self) -> dict:
        return {
            "task": self.task, "dataset": self.dataset, "endpoint": self.endpoint,
            "bundle": str(self.bundle), "checkpoint": str(self.checkpoint) if self.checkpoint else None,
        }


def request_input(example) -> dict:
    """An example as one input of our API: its task's text fields only (no label, no
    training-only fields such as a claim's gold_evidence index)."""
    from core.tasks import TASKS

    fields = dataclasses.asdict(example)
    task = next(task for task in TASKS.values() if set(task.field_names) <= set(fields))
    return {f.name: list(fields[f.name]) if f.many else fields[f.name] for f in task.fields}


@functools.cache
def test_split(dataset: str) -> tuple:
    """The test split of `dataset` (training.datasets.load_dataset), loaded once per run; a
    dataset that names a `.jsonl` file is read whole as `{premise, hypothesis, label}` pairs, so a machine without
    the data cache (a lent GPU machine) can bench entailment on a carried file."""
    if dataset.endswith(".jsonl") and Path(dataset).is_file():
        from training.readers import read_nli_jsonl

        return tuple(read_nli_jsonl(dataset))
    from training.datasets import load_dataset

    return tuple(load_dataset(dataset).test)


def test_examples(dataset: str, max_evidence: int | None, limit: int) -> list:
    """The first `limit` test examples of `dataset`; verification claims keep at most
    `max_evidence` evidence sentences (the bundle's limit, else the service answers 422)."""
    examples = list(test_split(dataset)[:limit])
    if max_evidence:
        examples = [dataclasses.replace(e, evidence=e.evidence[:max_evidence]) if hasattr(e, "evidence") else e
                    for e in examples]
    return examples


def write_bodies(examples: list, directory: Path) -> dict:
    """Write the body files for `examples` into `directory`; returns counts and sizes."""
    from training.checkpoint import EXAMPLES_FILE

    directory.mkdir(parents=True, exist_ok=True)
    inputs = [request_input(e) for e in examples]
    lines = {
        "single": [json.dumps(x, ensure_ascii=False) for x in inputs],
        "batch": [json.dumps({"inputs": inputs[i : i + BATCH_INPUTS]}, ensure_ascii=False)
                  for i in range(0, len(inputs) - BATCH_INPUTS + 1, BATCH_INPUTS)],
        "peer": [json.dumps({"inputs": [x]}, ensure_ascii=False) for x in inputs],
        "explain": [json.dumps({**x, "explain": True}, ensure_ascii=False) for x in inputs],
    }
    for name, rows in lines.items():
        (directory / f"{name}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    with open(directory / EXAMPLES_FILE, "w", encoding="utf-8") as fh:
        for example in examples:
            fh.write(json.dumps(dataclasses.asdict(example), ensure_ascii=False) + "\n")
    single_bytes = [len(r.encode()) for r in lines["single"]]
    return {
        "examples": len(examples),
        "batch_requests": len(lines["batch"]),
        "mean_single_body_bytes": round(sum(single_bytes) / len(single_bytes), 1),
    }


def read_examples(directory: Path) -> list:
    """The examples `write_bodies` wrote."""
    from training.checkpoint import load_examples

    return load_examples(directory)


def prepare(name: str, dataset: str, bundle: Path, checkpoint: Path | None, work: Path, limit: int) -> tuple[Workload, dict]:
    """Load the test examples for a bundle and write its body files under `work/name`."""
    from core.bundle import load_bundle

    bundle, checkpoint = bundle.resolve(), checkpoint.resolve() if checkpoint else None
    config = load_bundle(bundle).config
    examples = test_examples(dataset, config.max_evidence, limit)
    workload = Workload(name, config.task, dataset, bundle, checkpoint, work / name)
    stats = write_bodies(examples, workload.bodies)
    log.info("workload ready", extra={"workload": name, "dataset": dataset, **stats})
    return workload, {**workload.describe(), **stats, "max_lengths": config.max_lengths,
                      "max_evidence": config.max_evidence}


# --- the short mode's tiny model ------------------------------------------------------------

TINY_NAME = "tiny-nli"
TINY_ARCHITECTURE = "attconv-light"
TINY_SIZES = {"embedding_dim": 16, "hidden_dim": 16, "head_hidden": 16}
TINY_MAX_LENGTHS = {"premise_ids": 48, "hypothesis_ids": 32}
TINY_VOCAB_EXAMPLES = 2000


def build_tiny_model(work: Path) -> tuple[Path, Path]:
    """An untrained small AttConv-light entailment network with a tokenizer built from SNLI
    test texts, saved as a checkpoint and exported (parity-checked) as a bundle through the
    project's own writers. Returns (bundle directory, checkpoint directory)."""
    import torch

    from export.bundle import write_bundle_from_network
    from models import build_network
    from training.checkpoint import make_meta, save_checkpoint
    from training.datasets import SNLI_LABELS
    from training.examples import texts_of
    from training.tokenizer import build_tokenizer, save_tokenizer

    bundle, checkpoint = work / "repository" / TINY_NAME, work / "checkpoints" / TINY_NAME
    if (bundle / "config.json").is_file() and (checkpoint / "model.safetensors").is_file():
        return bundle, checkpoint
    examples = list(test_split("snli")[:TINY_VOCAB_EXAMPLES])
    tokenizer = build_tokenizer(t for e in examples for t in texts_of(e))
    tokenizer_path = save_tokenizer(tokenizer, work / "tokenizer.json")
    torch.manual_seed(0)
    network = build_network(TINY_ARCHITECTURE, task="entailment", vocab_size=tokenizer.get_vocab_size(),
                            num_labels=len(SNLI_LABELS), dropout=0.0, **TINY_SIZES).eval()
    meta = make_meta(TINY_NAME, network, list(SNLI_LABELS), architecture=TINY_ARCHITECTURE,
                     max_lengths=dict(TINY_MAX_LENGTHS), description="untrained benchmark model")
    save_checkpoint(checkpoint, network, meta, tokenizer_path)
    write_bundle_from_network(network, TINY_ARCHITECTURE, TINY_NAME, list(SNLI_LABELS), tokenizer_path, bundle,
                              max_lengths=dict(TINY_MAX_LENGTHS), examples=examples[:64], version="bench-tiny")
    return bundle, checkpoint
