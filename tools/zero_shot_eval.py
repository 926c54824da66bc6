"""Zero-shot classification (service.http.zero_shot) on the labelled sets we have, against the trained
classifiers and the majority label: the figures in docs/zero-shot.md and the entailment cards.

    .venv/bin/python tools/zero_shot_eval.py [--limit N] > zero_shot_eval.json

For each of BBC News (bbc-act's test split, 426 articles) and tweets (tweets-act's test split,
7,122 tweets), as `attserve data` prepares them (training.datasets, the recipes' own splits):
- every served entailment model (nli-attconv-advanced, scitail-attconv) answering the dataset's
  label names as candidate labels, with the default template and a task-worded one, single-label:
  accuracy of the top label; the pairs run through the service's engine in-process and the
  scores through service.http.zero_shot.zero_shot_answer, i.e. what /zero-shot answers;
- the trained classifier of the set (bbc-act, tweets-act) through the same engine;
- the majority label of the training split.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.inference.engine import Engine  # noqa: E402
from service.metrics import Metrics  # noqa: E402
from scoring.files import load_engine_parts, score_inputs  # noqa: E402
from service.http.zero_shot import DEFAULT_TEMPLATE, ZeroShotRequest, hypothesis, zero_shot_answer  # noqa: E402

REPOSITORY = ROOT / "model_repository"
SETS = {
    # dataset -> (its trained classifier, the label names as candidate labels, a task-worded template)
    "bbc": ("bbc-act", {"business": "business", "entertainment": "entertainment", "politics": "politics",
                        "sports": "sport", "tech": "technology"}, "This article is about {}."),
    "tweets": ("tweets-act", {"negative": "negative", "neutral": "neutral", "positive": "positive"},
               "The sentiment of this tweet is {}."),
}
ENTAILMENT_MODELS = ("nli-attconv-advanced", "scitail-attconv")


async def run_engine(bundle: Path, inputs: list[SimpleNamespace], threads: int, batch_size: int = 64) -> list[dict]:
    runtime, settings = load_engine_parts(bundle, threads, batch_size)
    engine = Engine(runtime, settings, Metrics())
    engine.start()
    answers = await score_inputs(engine, inputs, batch_size)
    await engine.drain(5.0)
    failed = [a for a in answers if isinstance(a, str)]
    if failed:
        raise RuntimeError(f"{len(failed)} inputs failed: {failed[:3]}")
    return answers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=0, help="first N test examples of each set (0: all)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from training.datasets import load_dataset

    report: dict = {}
    for name, (classifier, names, worded) in SETS.items():
        splits = load_dataset(name)
        test = splits.test[: args.limit] if args.limit else splits.test
        gold = [e.label for e in test]
        majority, _ = Counter(e.label for e in splits.train).most_common(1)[0]
        row: dict = {"examples": len(test), "labels": list(names),
                     "majority_label": {"label": majority,
                                        "accuracy": round(sum(g == majority for g in gold) / len(gold), 4)}}
        t0 = time.perf_counter()
        answers = asyncio.run(run_engine(REPOSITORY / classifier, [SimpleNamespace(text=e.text) for e in test],
                                         args.threads))
        row[classifier] = {"accuracy": round(sum(a["label"] == g for a, g in zip(answers, gold)) / len(gold), 4),
                           "seconds": round(time.perf_counter() - t0, 1)}
        candidates = list(names.values())
        to_gold = {v: k for k, v in names.items()}
        for model in ENTAILMENT_MODELS:
            labels = json.loads((REPOSITORY / model / "config.json").read_text())["labels"]
            for template in (DEFAULT_TEMPLATE, worded):
                t0 = time.perf_counter()
                pairs = [SimpleNamespace(premise=e.text, hypothesis=hypothesis(template, c)) for e in test
                         for c in candidates]
                results = asyncio.run(run_engine(REPOSITORY / model, pairs, args.threads))
                k = len(candidates)
                predicted, truncated = [], 0
                for i, e in enumerate(test):
                    body = ZeroShotRequest(text=e.text, candidate_labels=candidates, hypothesis_template=template)
                    answer = zero_shot_answer(body, results[i * k : (i + 1) * k], labels, model)
                    predicted.append(to_gold[answer["labels"][0]])
                    truncated += answer["truncated"]
                hits = sum(p == g for p, g in zip(predicted, gold))
                row[f"zero-shot {model} {template!r}"] = {
                    "accuracy": round(hits / len(gold), 4), "predicted": dict(Counter(predicted)),
                    "truncated_share": round(truncated / len(test), 3), "seconds": round(time.perf_counter() - t0, 1)}
                print(name, model, template, row[f"zero-shot {model} {template!r}"], file=sys.stderr, flush=True)
        report[name] = row
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
