"""How much of a checkpoint's pretrained-only vocabulary its accuracy needs: the checkpoint's dev
and test accuracy (and per source, for a mixed dataset) when its tokenizer keeps only the first N
pretrained-only words (training.tokenizer.cut_pretrained; the words after them hash into the
[OOV] buckets, as every word outside the vocabulary does). Those rows are frozen GloVe vectors in
training, so a cut checkpoint is the network as trained, reading fewer words. For choosing a
recipe's `pretrained_vocab` under the repository's size budget (each 10,000 words of 50-d float16
rows add 1 MB to model.onnx and ~0.25 MB to tokenizer.json).

    python tools/pretrained_vocab_probe.py checkpoints/scitail-attconv scitail 0,10000,20000,40000,100000 \\
        [--parts dev,test] [--ood] [--json runs/vocab-probe.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("dataset", help="the named dataset whose dev and test are scored, e.g. scitail or nli-mix")
    parser.add_argument("sizes", help="comma-separated pretrained-only word counts to keep")
    parser.add_argument("--parts", default="dev,test", help="which splits to score (comma-separated)")
    parser.add_argument("--ood", action="store_true", help="also score the task's out-of-domain dev sets (training.ood)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import torch
    from tokenizers import Tokenizer

    from core.tokenization import TextEncoder
    from training.checkpoint import TOKENIZER_FILE, load_checkpoint
    from training.datasets import load_dataset
    from training.tokenizer import cut_pretrained, pretrained_count
    from training.trainer import EncodedExamples, accuracy_by_source, predict_logits

    torch.set_num_threads(args.threads)
    network, meta = load_checkpoint(args.checkpoint)
    tokenizer = Tokenizer.from_file(str(args.checkpoint / TOKENIZER_FILE))
    available = pretrained_count(tokenizer)
    splits = load_dataset(args.dataset)
    results = {}
    for size in (int(s) for s in args.sizes.split(",")):
        encoder = TextEncoder(cut_pretrained(tokenizer, size) if size < available else tokenizer)
        row: dict = {"pretrained_words": min(size, available)}
        for part in args.parts.split(","):
            encoded = EncodedExamples.encode(encoder, getattr(splits, part), meta.labels, meta.max_lengths, meta.max_evidence)
            predicted = predict_logits(network, encoded).argmax(-1)
            row[part] = float(np.mean(predicted == encoded.labels))
            if splits.sources.get(part):
                row[f"{part}_by_source"] = accuracy_by_source(encoded.labels, predicted, splits.sources[part])
        if args.ood:
            from training.ood import ood_sets

            for ood in (found for found in ood_sets(splits.task) if found.fits(meta.labels)):
                encoded = EncodedExamples.encode(encoder, ood.examples, ood.labels, meta.max_lengths, meta.max_evidence)
                metrics = ood.metrics(predict_logits(network, encoded), meta.labels)
                row[f"ood_{ood.name}"] = {k: metrics[k] for k in ("accuracy", "accuracy_two_way") if k in metrics}
        results[size] = row
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"checkpoint": str(args.checkpoint), "dataset": args.dataset, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
