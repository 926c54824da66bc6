"""Per-source accuracy of entailment bundles on a mixed dataset's parts (`nli-mix`: SNLI,
MultiNLI, XNLI, QNLI, SciTail, FEVER pairs), through each bundle's own ONNX graph (the card's
scoring path, training.card.score_examples): how a model does on each source's held-back dev
(or test) pairs, before and after a retrain.

    python tools/source_breakdown.py model_repository/snli-attconv-advanced [BUNDLE ...] \\
        [--split dev] [--json runs/breakdown.json] [--markdown runs/breakdown.md]

Two figures per source:
    3-way    argmax == gold, in the mix's labels (entailment / neutral / contradiction); only for a
             bundle with those labels
    2-way    "entailment or not": the bundle's first label (entailment, SciTail's entails) against
             the rest, for gold and prediction alike. SciTail and QNLI are two-way tasks, and
             this is how their own test sets score a three-way model (a contradiction answer to
             a SciTail "neutral" pair is right)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.bundle import load_bundle  # noqa: E402
from core.tokenization import TextEncoder  # noqa: E402
from training.card import open_session, score_examples  # noqa: E402


def breakdown(bundle_dir: Path, examples: list, sources: list[str], labels: list[str], threads: int = 1) -> dict[str, dict[str, Any]]:
    """source -> {examples, accuracy_3way (None unless the bundle has `labels`), accuracy_2way}, plus "mean"
    (the mean over sources, the figure nli-mix training selects on)."""
    bundle = load_bundle(bundle_dir)
    config = bundle.config
    logits = score_examples(open_session(bundle.model_path, threads), TextEncoder.from_file(bundle.tokenizer_path), config,
                            examples, progress=False).logits
    predicted = logits.argmax(axis=1)
    three_way = list(config.labels) == list(labels)
    gold = np.array([labels.index(e.label) for e in examples])
    entail_gold = gold == 0  # labels[0] is entailment
    entail_pred = predicted == 0  # the bundle's first label: entailment / entails
    names = np.asarray(sources)
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(sources):
        rows = names == name
        out[name] = {
            "examples": int(rows.sum()),
            "accuracy_3way": float((predicted[rows] == gold[rows]).mean()) if three_way else None,
            "accuracy_2way": float((entail_pred[rows] == entail_gold[rows]).mean()),
        }
    per_source = [v["accuracy_3way"] for v in out.values()]
    out["mean"] = {"examples": len(examples), "accuracy_3way": float(np.mean(per_source)) if three_way else None,
                   "accuracy_2way": float(np.mean([v["accuracy_2way"] for k, v in out.items()]))}
    return out


def markdown(results: dict[str, dict[str, dict[str, Any]]], split: str) -> str:
    names = list(next(iter(results.values())))
    head = f"| bundle ({split}) | " + " | ".join(names) + " |"
    lines = [head, "|---|" + "---:|" * len(names)]
    for bundle, figures in results.items():
        cells = []
        for name in names:
            f = figures[name]
            three = "-" if f["accuracy_3way"] is None else f"{100 * f['accuracy_3way']:.1f}"
            cells.append(f"{three} / {100 * f['accuracy_2way']:.1f}")
        lines.append(f"| `{bundle}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", nargs="+", type=Path)
    parser.add_argument("--dataset", default="nli-mix")
    parser.add_argument("--split", default="dev", choices=("dev", "test"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)

    from training.datasets import load_dataset

    splits = load_dataset(args.dataset)
    examples, sources = getattr(splits, args.split), splits.sources.get(args.split)
    if not sources:
        raise SystemExit(f"{args.dataset} is not a mixed dataset (no sources)")
    results = {}
    for bundle in args.bundles:
        started = time.perf_counter()
        results[bundle.name] = breakdown(bundle, examples, sources, list(splits.labels), args.threads)
        print(f"{bundle.name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    table = markdown(results, args.split)
    print("3-way / 2-way (entailment or not) accuracy, %\n" + table)
    if args.json:
        args.json.write_text(json.dumps({"dataset": args.dataset, "split": args.split, "results": results}, indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main()
