"""Where a verification checkpoint's errors come from.

Splits a split's claims by how they were built (training/verification.py): claims whose
evidence holds the gold premise, by SNLI label, and claims whose gold premise was left out
(labelled NOT ENOUGH INFO). For claims with their gold premise it also reports how often the
evidence the network scored highest is the gold premise (the attribution's hit rate), against
the 1/K of a random pick.

    python tools/verification_breakdown.py checkpoints/snli-verification-attconv --split test

Writes JSON to stdout; progress and logs go to stderr.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from tqdm.auto import tqdm

from core.tokenization import TextEncoder
from training.checkpoint import load_checkpoint
from training.datasets import SPLIT_SEED, _snli_pairs
from training.trainer import EncodedExamples, predict_batches
from training.verification import build_claims


def main(
    checkpoint: Annotated[Path, typer.Argument(exists=True, file_okay=False)],
    split: Annotated[str, typer.Option(help="train, dev or test")] = "test",
    batch_size: int = 256,
) -> None:
    network, meta = load_checkpoint(checkpoint)
    if meta.task != "verification":
        raise typer.BadParameter(f"{checkpoint} is a {meta.task} checkpoint, not verification")
    (train, dev, test), _ = _snli_pairs(None)
    pairs = {"train": train, "dev": dev, "test": test}[split]
    records = build_claims(pairs, seed=SPLIT_SEED, split=split)
    encoder = TextEncoder.from_file(checkpoint / "tokenizer.json")
    data = EncodedExamples.encode(encoder, [r.example for r in records], meta.labels, meta.max_lengths, meta.max_evidence)

    predictions = np.zeros(len(records), dtype=np.int64)
    top_evidence = np.zeros(len(records), dtype=np.int64)
    batches = predict_batches(network, data, batch_size)
    for indices, (logits, evidence_scores) in tqdm(batches, total=math.ceil(len(data) / batch_size),
                                                   desc="scoring", unit="batch"):  # (B, C), (B, K)
        predictions[indices] = logits.argmax(-1).cpu().numpy()
        top_evidence[indices] = evidence_scores.argmax(-1).cpu().numpy()

    groups: dict[str, list[int]] = defaultdict(list)
    for i, record in enumerate(records):
        snli_label = record.source.example.label
        groups[f"gold kept, SNLI {snli_label}" if record.gold_index is not None else f"gold left out (was {snli_label})"].append(i)
    labels = np.asarray(data.labels)
    report = {"checkpoint": str(checkpoint), "split": split, "claims": len(records),
              "accuracy": float((predictions == labels).mean()), "groups": {}}
    for name, members in sorted(groups.items()):
        idx = np.asarray(members)
        predicted = {meta.labels[c]: int((predictions[idx] == c).sum()) for c in range(len(meta.labels))}
        report["groups"][name] = {"claims": len(idx), "accuracy": float((predictions[idx] == labels[idx]).mean()), "predicted": predicted}

    kept = [(i, r) for i, r in enumerate(records) if r.gold_index is not None and len(r.example.evidence) > 1]
    hits = np.asarray([top_evidence[i] == r.gold_index for i, r in kept])
    chance = float(np.mean([1.0 / len(r.example.evidence) for _, r in kept]))
    report["attribution"] = {"claims_with_gold_and_k_gt_1": len(kept), "top_evidence_is_gold": float(hits.mean()), "random_pick": chance}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
